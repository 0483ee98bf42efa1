"""What a run prints at the end (the table, the ratios to the seed, the notes under them) and results.json."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

from .common import MINILM_PACKAGE, percentile
from .install_size import SEED_PACKAGES
from .runner import Runs


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    mem = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    return (f"{cpu}, {len(os.sched_getaffinity(0))} CPUs, {mem:.0f} GiB, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and a == a else "–"



def p50(row) -> float:
    return statistics.median(row["ms"]) if row["ms"] else float("nan")


def p95(row) -> float:
    return percentile(row["ms"], 0.95) if row["ms"] else float("nan")


def ms(value: float) -> str:
    return "–" if value != value else f"{value:.1f}"  # NaN: not timed (scores of the policy timed above)


def build_rows(runs: Runs, ndcg, policies: list[str]) -> dict[str, dict]:
    """One row a system: nDCG@10, query times, ingest, peak RSS and install size."""
    seed, seed_funnel, f_ingest, f_rerank = runs.seed, runs.seed_funnel, runs.f_ingest, runs.f_rerank
    f_none, f_default, f_langchain = runs.f_none, runs.f_default, runs.f_langchain
    install_funnel = runs.install_funnel
    funnel_rss = max(f_ingest["ru_maxrss_mb"], f_rerank["ru_maxrss_mb"])
    rows = {
        "seed": {"name": "seed: EnsembleRetriever(BM25 + FAISS) + CrossEncoder", "ndcg": ndcg(seed["final"]),
                 "ms": seed["query_ms"], "ingest": seed["ingest_s"], "rss": seed["ru_maxrss_mb"],
                 "install": runs.install_seed},
        "funnel_rerank": {"name": "funnel: hybrid + built-in reranker (rrf)", "ndcg": ndcg(f_rerank["final"]),
                          "ms": f_rerank["query_ms"], "ingest": f_ingest["ingest_s"], "rss": funnel_rss,
                          "install": install_funnel["site_packages_mb"]},
        "funnel_default": {"name": f"funnel default: built-in reranker, policy auto ({f_ingest['calibration']})",
                           "ndcg": ndcg(f_default["final"]), "ms": f_default["query_ms"],
                           "ingest": f_ingest["ingest_s"], "rss": max(f_ingest["ru_maxrss_mb"],
                                                                      f_default["ru_maxrss_mb"]),
                           "install": install_funnel["site_packages_mb"]},
        "funnel_none": {"name": "funnel: hybrid, reranker none", "ndcg": ndcg(f_none["final"]),
                        "ms": f_none["query_ms"], "ingest": f_ingest["ingest_s"],
                        "rss": max(f_ingest["ru_maxrss_mb"], f_none["ru_maxrss_mb"]),
                        "install": install_funnel["site_packages_mb"]},
    }
    for i, p in enumerate(policies):
        rows[f"seed_funnel_{p}"] = {
            "name": f"seed first stage + FunnelReranker ({p})" + ("" if i == 0 else f", {policies[0]}'s scores"),
            "ndcg": ndcg(seed_funnel["final"][p]), "ms": seed_funnel["query_ms"].get(p),
            "ingest": seed["ingest_s"], "rss": seed_funnel["ru_maxrss_mb"], "install": runs.install_seed_funnel}
    rows["funnel_langchain"] = {
        "name": "funnel: FunnelRetriever in LangChain (rrf)", "ndcg": ndcg(f_langchain["final"]),
        "ms": f_langchain["query_ms"], "ingest": f_ingest["ingest_s"],
        "rss": max(f_ingest["ru_maxrss_mb"], f_langchain["ru_maxrss_mb"]), "install": install_funnel["site_packages_mb"]}
    return rows


class Report:
    """The end of a run: rows and notes from every child's result, printed, then written to results.json."""

    def __init__(self, args, evalset, n_records: int, runs: Runs, loads: tuple, started: float) -> None:
        from funnel.eval.metrics import mean, per_query

        def ndcg(rankings: dict[str, list[str]]) -> float:
            return mean(per_query(evalset.qrels, rankings)["ndcg@10"])

        self.args, self.evalset, self.n_records, self.runs = args, evalset, n_records, runs
        self.load_start, self.load_end = loads
        self.started = started
        self.policies = args.funnel_policies.split(",")
        self.rows = build_rows(runs, ndcg, self.policies)
        seed, seed_funnel = runs.seed, runs.seed_funnel
        self.seed_first = {"ndcg": ndcg(seed["first_stage"]), "ms": seed["first_stage_ms"]}
        self.same_first = sum(seed["first_stage"][q] == seed_funnel["first_stage"].get(q)
                              for q in seed["first_stage"])

    def print_all(self, work: Path) -> None:
        self.print_table()
        self.print_seed_funnel()
        self.print_processes()
        self.print_funnel()
        self.print_install_and_check()
        self.write_results(work)

    def print_table(self) -> None:
        args, evalset, rows, load_start, load_end = self.args, self.evalset, self.rows, self.load_start, self.load_end
        print(f"\n## seed stack vs funnel: {evalset.name} {evalset.split}, {len(evalset.queries)} queries, "
              f"{self.n_records} records\n")
        print(f"{time.strftime('%Y-%m-%d %H:%M')}; {machine()}; threads {args.threads} (torch, ORT, OpenMP); "
              f"load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; run took "
              f"{time.time() - self.started:.0f} s\n")
        print("| system | nDCG@10 | query p50 ms | p95 ms | ingest s | peak RSS MB | install MB |")
        print("|---|---|---|---|---|---|---|")
        for row in rows.values():
            print(f"| {row['name']} | {row['ndcg']:.4f} | {ms(p50(row))} | {ms(p95(row))} | {row['ingest']:.1f} | "
                  f"{row['rss']:.0f} | {row['install']:.0f} |")
        for key in ("funnel_rerank", "funnel_default", "funnel_none", *(f"seed_funnel_{p}" for p in self.policies),
                    "funnel_langchain"):
            a, b = rows[key], rows["seed"]
            print(f"| ratio {key.replace('_', ' ')} / seed | {ratio(a['ndcg'], b['ndcg'])} | "
                  f"{ratio(p50(a), p50(b))} | {ratio(p95(a), p95(b))} | {ratio(a['ingest'], b['ingest'])} | "
                  f"{ratio(a['rss'], b['rss'])} | {ratio(a['install'], b['install'])} |")

    def print_seed_funnel(self) -> None:
        args, policies, seed, seed_funnel = self.args, self.policies, self.runs.seed, self.runs.seed_funnel
        model_ms = seed_funnel["model_ms"]
        print(f"\nseed + FunnelReranker: first stage identical to the seed's on {self.same_first}/"
              f"{len(seed['first_stage'])} queries; per query ({policies[0]}, end to end p50 "
              f"{statistics.median(seed_funnel['query_ms'][policies[0]]):.1f} ms) "
              f"funnel's int8 model p50 {statistics.median(model_ms):.1f} / p95 {percentile(model_ms, 0.95):.1f} ms, "
              f"the rest (LangChain first stage + policy + Documents) p50 "
              f"{statistics.median(a - m for a, m in zip(seed_funnel['query_ms'][policies[0]], model_ms)):.1f} ms"
              + f"; rerank status {seed_funnel['statuses']}; reranker load {seed_funnel['load_s']:.1f} s; "
              f"{seed_funnel['few_candidates']} queries had < {args.candidates} candidates. Install: seed = its own "
              f"packages ({len(SEED_PACKAGES)} pins + their dependencies), seed + FunnelReranker = all of "
              f"{self.runs.seed_venv} (+ {', '.join(self.runs.dists['not_seed_dists'])}).")
        paired, gs_ms = seed_funnel["paired_seed_ms"], seed_funnel["paired_funnel_ms"]
        print(f"Paired in one process (the seed's CrossEncoder search and seed + FunnelReranker ({policies[0]}) "
              f"interleaved query by query): seed p50 {statistics.median(paired):.1f} / p95 "
              f"{percentile(paired, 0.95):.1f} ms, FunnelReranker p50 {statistics.median(gs_ms):.1f} / p95 "
              f"{percentile(gs_ms, 0.95):.1f} ms; per-query ratio median "
              f"{statistics.median(f / s for f, s in zip(gs_ms, paired)):.2f}x; FunnelReranker faster on "
              f"{sum(f < s for f, s in zip(gs_ms, paired))}/{len(paired)} queries.")

    def print_processes(self) -> None:
        r = self.runs
        print("1-min load average at start/end of each process: " + "; ".join(
            f"{name} {c['loadavg_1min'][0]:.1f}/{c['loadavg_1min'][1]:.1f} ({c['wall_s']:.0f} s)"
            for name, c in (("seed", r.seed), ("seed-funnel", r.seed_funnel), ("funnel-ingest", r.f_ingest),
                            ("funnel-none", r.f_none), ("funnel-rrf", r.f_rerank),
                            ("funnel-langchain", r.f_langchain), ("funnel-default", r.f_default))))
        print(f"FunnelRetriever in LangChain: same pipeline and policy as the rrf row; rerank status "
              f"{r.f_langchain['statuses']}; same top 10 as the rrf row on "
              f"{sum(r.f_langchain['final'][q] == r.f_rerank['final'][q] for q in r.f_rerank['final'])}/"
              f"{len(r.f_rerank['final'])} queries.")

    def print_funnel(self) -> None:
        args, seed_first, seed = self.args, self.seed_first, self.runs.seed
        f_ingest, f_none, f_rerank = self.runs.f_ingest, self.runs.f_none, self.runs.f_rerank
        print(f"\nFirst stage alone: seed EnsembleRetriever top {args.candidates} nDCG@10 {seed_first['ndcg']:.4f}, "
              f"p50 {statistics.median(seed_first['ms']):.1f} / p95 {percentile(seed_first['ms'], 0.95):.1f} ms "
              f"(funnel hybrid: the `reranker none` row).")
        print(f"Units indexed: seed {seed['units']} ({args.seed_chunks}), funnel {f_ingest['units']} chunks of "
              f"{f_ingest['documents']} records. Seed: imports {seed['import_s']:.1f} s, CrossEncoder load "
              f"{seed['load_s']:.1f} s (not in ingest), RSS after ingest {seed['rss_after_ingest_mb']:.0f} MB; "
              f"{seed['few_candidates']} queries had < {args.candidates} candidates.")
        print(f"funnel: ingest process {f_ingest['ru_maxrss_mb']:.0f} MB, query process {f_none['ru_maxrss_mb']:.0f} MB "
              f"(none) / {f_rerank['ru_maxrss_mb']:.0f} MB (builtin); model load {f_none['load_s']:.1f} / "
              f"{f_rerank['load_s']:.1f} s; rerank status {f_rerank['statuses']}; queries with < 10 documents "
              f"in the 25-candidate window: {f_rerank['short_rankings']} (rrf), {f_none['short_rankings']} (none).")
        print(f"Calibration after the ingest ({f_ingest['calibrate_s']:.0f} s, not in the ingest column): "
              f"{f_ingest['calibration']} — {f_ingest['calibration_reason']}; default's rerank status "
              f"{self.runs.f_default['statuses']}.")

    def print_install_and_check(self) -> None:
        install_funnel, check = self.runs.install_funnel, self.runs.check
        print(f"Install: seed = du of {self.runs.seed_venv}/lib/*/site-packages less funnel's packages; funnel = "
              f"fresh `pip install .` + {MINILM_PACKAGE} --no-deps ({install_funnel['key']}, measured "
              f"{install_funnel['measured']}; built-in reranker found there: {install_funnel['builtin_reranker_found']}). "
              "Model files outside site-packages: seed cross-encoder checkpoint "
              f"{sum(p.stat().st_size for p in self.args.cross_encoder.iterdir()) / 2**20:.0f} MB; funnel "
              "funnel/rerank/models/funnel-reranker-minilm 23 MB + its ONNX embedder build in ~/.cache/funnel/models.")
        if "hash_matches_shipped" in check:
            provenance = (f"trained fp32 checkpoint; its hash = shipped source_sha256: "
                          f"{check['hash_matches_shipped']}; int8 rebuilt from it byte-identical to the shipped model: "
                          f"{check['rebuilt_int8_identical']}")
        else:
            provenance = (f"shipped int8 dequantized to fp32 (export of the shipped file: "
                          f"{check['export_of_shipped']}); "
                          f"quantised again, its int8 weights identical to the shipped ones: "
                          f"{check['requantized_int8_weights_identical']} (scales/biases within "
                          f"{check['requantized_max_float_diff']:.1e})")
        print(f"Cross-encoder check ({check['queries']} queries, {check['pairs']} pairs of the funnel rrf run): "
              f"{provenance}; max |logit| diff torch fp32 vs "
              f"ONNX fp32 {check['max_abs_logit_torch_vs_onnx_fp32']:.2e}, vs shipped int8 "
              f"{check['max_abs_logit_torch_vs_int8']:.3f} (sigmoid {check['max_abs_sigmoid_torch_vs_int8']:.3f}); "
              f"shipped int8 vs torch ranking: Kendall tau {check['kendall_tau_torch_vs_int8_mean']:.3f}, top-1 same "
              f"{check['top1_agreement_torch_vs_int8']:.2f}.")

    def write_results(self, work: Path) -> None:
        args, r = self.args, self.runs
        results = {"seed_funnel_same_first_stage": self.same_first, "seed_not_seed_dists": r.dists["not_seed_dists"],
                   "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "args": vars(args) | {
            "dataset": str(args.dataset), "cross_encoder": str(args.cross_encoder), "out": str(args.out)},
            "queries": len(self.evalset.queries), "records": self.n_records,
            "loadavg": [self.load_start, self.load_end],
            "rows": {k: {**v, "p50": p50(v), "p95": p95(v)} for k, v in self.rows.items()},
            "seed_first_stage": self.seed_first, "check": r.check, "install_funnel": r.install_funnel,
            "seed_freeze": r.freeze,
            "children": {name: {k: v for k, v in c.items() if k not in ("final", "first_stage", "check", "logits")}
                         for name, c in (("seed", r.seed), ("seed-funnel", r.seed_funnel), ("funnel-ingest", r.f_ingest),
                                         ("funnel-none", r.f_none), ("funnel-default", r.f_default),
                                         ("funnel-rerank", r.f_rerank), ("funnel-langchain", r.f_langchain))}}
        (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
        print(f"\nwrote {work / 'results.json'}")
