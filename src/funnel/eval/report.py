"""Scores, comparisons and the gate for one evaluation run, and the files it writes.

results.json: {"variants": {NAME: {"ndcg@10": x, "recall@100": x, "mrr@10": x, ...}},
               "comparisons": {NAME: {...}}, "latency_ms": {...}, "per_query": {NAME: {QID: {...}}}, ...}
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from funnel.eval.compare import Comparison, compare
from funnel.eval.metrics import HEADLINE, MEASURES, first_relevant_rank, mean, per_query
from funnel.eval.runner import EvalRun

# Page-level scores of a question set with `page` fields: label -> the measure over page rankings.
PAGE_MEASURES = {"page_hit@1": "hit@1", "page_hit@5": "hit@5", "page_mrr@10": "mrr@10"}


@dataclass(frozen=True)
class Scores:
    run: EvalRun
    baseline: str
    values: dict[str, dict[str, dict[str, float]]]  # variant -> metric -> qid -> value
    means: dict[str, dict[str, float]]  # variant -> metric -> mean
    comparisons: dict[str, Comparison]


def score(run: EvalRun, baseline: str) -> Scores:
    evalset = run.evalset
    evaluated = {name: vr for name, vr in run.variants.items() if not vr.skipped_reason}
    values = {name: per_query(evalset.qrels, vr.rankings) for name, vr in evaluated.items()}
    # No judged sources at all (an answers-only question set): no retrieval metric, rather than zeros.
    means = {name: {metric: mean(v) for metric, v in metrics.items() if v} for name, metrics in values.items()}
    for name, vr in evaluated.items():
        if evalset.pages:
            page_values = per_query(evalset.pages, vr.page_rankings)
            for label, measure in PAGE_MEASURES.items():
                values[name][label] = page_values[measure]
                means[name][label] = mean(page_values[measure])
        if vr.passed:
            means[name]["answers_passed"] = sum(vr.passed.values()) / len(vr.passed)
        if vr.quoted and vr.passed_with_quote:  # a reader quoted the picker's sentences beside some answers
            means[name]["answers_passed_with_quote"] = sum(vr.passed_with_quote.values()) / len(vr.passed_with_quote)
        if vr.abstained:  # `expect: abstain` questions that abstained; the answerable ones that did, wrongly
            unanswerable = [vr.abstained[q] for q in vr.abstained if q in evalset.abstain]
            answerable = [vr.abstained[q] for q in vr.abstained if q not in evalset.abstain]
            if unanswerable:
                means[name]["abstained_unanswerable"] = sum(unanswerable) / len(unanswerable)
            if answerable:
                means[name]["abstained_answerable"] = sum(answerable) / len(answerable)
    comparisons = {}
    if baseline in evaluated:
        rankings = {name: vr.rankings for name, vr in evaluated.items()}
        passed = {name: vr.passed for name, vr in evaluated.items()}
        for name in evaluated:
            if name != baseline:
                comparisons[name] = compare(
                    name, baseline, HEADLINE, values, rankings, evalset.qrels, evalset.queries, passed
                )
    return Scores(run, baseline, values, means, comparisons)


def gate(scores: Scores, max_hurt: int | None = None, tolerance: float = 1e-9) -> list[str]:
    """Why the run fails the gate (empty = passes). Variants that build on the baseline
    (`BASE+rerank(...)`) must not lose on the headline metric, break an answer, or hurt > max_hurt queries."""
    failures = []
    if scores.baseline not in scores.means:
        return [f"baseline {scores.baseline!r} was not evaluated"]
    gated = [name for name in scores.run.variants if name.startswith(scores.baseline + "+")]
    if not gated:
        return [f"no variant builds on {scores.baseline} (e.g. {scores.baseline}+rerank(guaranteed_slots)); nothing to gate"]
    for name in gated:
        if scores.run.variants[name].skipped_reason:
            failures.append(f"{name} was not evaluated: {scores.run.variants[name].skipped_reason}")
    judged = bool(scores.values.get(scores.baseline, {}).get(HEADLINE))
    for name, comparison in scores.comparisons.items():
        if not name.startswith(scores.baseline + "+"):
            continue
        if judged and comparison.delta < -tolerance:
            failures.append(
                f"{name} {HEADLINE} {comparison.variant_mean:.4f} < {scores.baseline} {comparison.baseline_mean:.4f}"
            )
        if comparison.answers_broken:
            failures.append(f"{name} breaks the answer to {', '.join(comparison.answers_broken)}")
        if max_hurt is not None and len(comparison.hurt) > max_hurt:
            failures.append(f"{name} hurts {len(comparison.hurt)} queries (allowed {max_hurt})")
    for name, vr in scores.run.variants.items():
        if vr.fallbacks and name.startswith(scores.baseline + "+"):
            failures.append(f"{name}: the reranker fell back on {sum(vr.fallbacks.values())} queries")
    return failures


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0}
    ordered = sorted(values)
    return {"p50": statistics.median(ordered), "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]}


def results_json(scores: Scores, failures: list[str]) -> dict:
    run, evalset = scores.run, scores.run.evalset
    variants = {}
    for name, vr in run.variants.items():
        entry = dict(scores.means.get(name, {}))
        if vr.skipped_reason:
            entry["skipped"] = vr.skipped_reason
        if vr.fallbacks:
            entry["rerank_fallbacks"] = sum(vr.fallbacks.values())
            entry["fallback_reasons"] = dict(vr.fallbacks)
        if vr.answer_fallbacks:  # the LLM failed and the extractive answer stood in: say so, loudly
            entry["answer_fallbacks"] = sum(vr.answer_fallbacks.values())
            entry["answer_fallback_reasons"] = dict(vr.answer_fallbacks)
        variants[name] = entry
    per_query_out = {}
    for name, metrics in scores.values.items():
        vr = run.variants[name]
        per_query_out[name] = {
            qid: {
                **{m: metrics[m][qid] for m in MEASURES},
                "first_relevant_rank": first_relevant_rank(evalset.qrels[qid], vr.rankings.get(qid, [])),
                **({"passed": vr.passed[qid]} if qid in vr.passed else {}),
            }
            for qid in metrics[HEADLINE]
        }
        for qid, ok in vr.passed.items():
            per_query_out[name].setdefault(qid, {"passed": ok})
        for qid, abstained in vr.abstained.items():
            per_query_out[name].setdefault(qid, {})["abstained"] = abstained
        for qid, judged in evalset.pages.items():
            rank = first_relevant_rank(judged, vr.page_rankings.get(qid, []))
            per_query_out[name].setdefault(qid, {})["page_rank"] = rank
    return {
        "dataset": evalset.name,
        "split": evalset.split,
        "level": evalset.level,
        "queries": len(evalset.queries),
        "skipped": evalset.skipped,
        "embedder": run.embedder,
        "reranker": run.reranker,
        "depth": run.depth,
        "baseline": scores.baseline,
        "headline": HEADLINE,
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "variants": variants,
        "comparisons": {name: {**asdict(c), "delta": c.delta} for name, c in scores.comparisons.items()},
        "latency_ms": {stage: _percentiles(v) for stage, v in run.latency_ms.items()},
        "gate": {"passed": not failures, "failures": failures},
        "per_query": per_query_out,
    }


def metric_columns(results: dict) -> list[str]:
    present = [*MEASURES, *PAGE_MEASURES, "answers_passed", "answers_passed_with_quote", "abstained_unanswerable",
               "abstained_answerable"]
    return [m for m in present if any(m in v for v in results["variants"].values())]


def markdown(results: dict) -> str:
    columns = metric_columns(results)
    lines = [
        f"# funnel eval: {results['dataset']} ({results['split']}, {results['level']} level)",
        "",
        f"{results['queries']} queries; embedder {results['embedder']}; reranker {results['reranker']}; "
        f"{results['date']}; {results['machine']}.",
    ]
    if results["skipped"]:
        lines.append("Skipped: " + "; ".join(f"{n} {why}" for why, n in results["skipped"].items()) + ".")
    lines += ["", "| variant | " + " | ".join(columns) + " | vs " + results["baseline"] + " |",
              "|---|" + "---|" * (len(columns) + 1)]
    for name, entry in results["variants"].items():
        if "skipped" in entry:
            lines.append(f"| {name} | " + " | ".join("–" for _ in columns) + f" | skipped: {entry['skipped']} |")
            continue
        cells = [f"{entry[c]:.4f}" if c in entry else "–" for c in columns]
        c = results["comparisons"].get(name)
        versus = (
            f"{c['delta']:+.4f} (p={c['p_randomization']:.3f}; +{len(c['helped'])}/−{len(c['hurt'])} queries)"
            if c else "baseline" if name == results["baseline"] else ""
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {versus} |")
    lines += ["", "Latency per query (ms): " + ", ".join(
        f"{stage} p50 {v['p50']:.1f} / p95 {v['p95']:.1f}" for stage, v in results["latency_ms"].items()
    ) + " (group covers every variant)."]
    for name, c in results["comparisons"].items():
        if not c["hurt"] and not c["answers_broken"]:
            continue
        lines += ["", f"## {name}: queries hurt vs {results['baseline']}", "",
                  "| query | nDCG@10 before → after | first relevant rank before → after |", "|---|---|---|"]
        for q in c["hurt"][:20]:
            lines.append(f"| {q['query'][:80]} | {q['before']:.3f} → {q['after']:.3f} | "
                         f"{q['rank_before'] or '–'} → {q['rank_after'] or '–'} |")
        if len(c["hurt"]) > 20:
            lines.append(f"| … {len(c['hurt']) - 20} more in results.json | | |")
        if c["answers_broken"]:
            lines += ["", "Answers broken: " + ", ".join(c["answers_broken"])]
    lines += _per_question(results)
    gate_info = results["gate"]
    lines += ["", "Gate: " + ("passed" if gate_info["passed"] else "FAILED — " + "; ".join(gate_info["failures"]))]
    return "\n".join(lines) + "\n"


def _per_question(results: dict) -> list[str]:
    """For a question set judged by page or answer: each question's page rank and answer, per variant."""
    per_query_out = results["per_query"]
    names = [n for n in results["variants"] if n in per_query_out]
    shown = [n for n in names if any("page_rank" in q or "passed" in q for q in per_query_out[n].values())]
    if not shown:
        return []
    lines = ["", "## Per question: rank of the right page (– = not in the top 100), answer ✓/✗", "",
             "| question | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
    for qid in per_query_out[shown[0]]:
        cells = []
        for name in shown:
            entry = per_query_out[name].get(qid, {})
            page = f"p@{entry['page_rank'] or '–'}" if "page_rank" in entry else ""
            answer = {True: "✓", False: "✗"}.get(entry.get("passed"), "")
            cells.append(f"{page} {answer}".strip())
        lines.append(f"| {qid} | " + " | ".join(cells) + " |")
    return lines


def plot(results: dict, path: Path) -> None:
    """Headline metric per variant, and per-query wins/losses against the baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = HEADLINE if any(HEADLINE in e for e in results["variants"].values()) else "answers_passed"
    names = [n for n, e in results["variants"].items() if headline in e]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    values = [results["variants"][n][headline] for n in names]
    left.barh(names, values, color="#4C72B0")
    left.set_xlabel(headline)
    left.invert_yaxis()
    for y, v in enumerate(values):
        left.text(v, y, f" {v:.3f}", va="center")
    left.set_xlim(0, max(values + [0.01]) * 1.2)
    compared = list(results["comparisons"])
    wins = [len(results["comparisons"][n]["helped"]) for n in compared]
    losses = [-len(results["comparisons"][n]["hurt"]) for n in compared]
    right.barh(compared, wins, color="#55A868", label="helped")
    right.barh(compared, losses, color="#C44E52", label="hurt")
    right.axvline(0, color="black", linewidth=0.8)
    right.invert_yaxis()
    right.set_xlabel(f"queries vs {results['baseline']}")
    right.legend(loc="lower right")
    fig.suptitle(f"{results['dataset']} ({results['split']}): {results['queries']} queries")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "report.md", out / "metrics.png"]
    paths[0].write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    paths[1].write_text(markdown(results), encoding="utf-8")
    plot(results, paths[2])
    return paths
