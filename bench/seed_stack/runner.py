"""The parent's side of each role: one subprocess per system and phase, with its peak RSS and wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .common import ROOT, SCRIPT
from .cross_encoder_check import check_cross_encoder
from .install_size import funnel_install, site_packages_mb


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
        env[name] = str(threads)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    return env


def run_child(python: str, role: str, spec: dict, work: Path, threads: int, tag: str | None = None) -> dict:
    """Run one role in its own process; its result plus its peak RSS as the kernel counted it (wait4)."""
    tag = tag or role
    spec_path, out_path, log_path = (work / f"{tag}.{ext}" for ext in ("spec.json", "out.json", "log"))
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [python, str(SCRIPT), "--role", role, "--spec", str(spec_path), "--result", str(out_path)],
            stdout=log, stderr=subprocess.STDOUT, env=child_env(threads), cwd=ROOT,
        )
        _, status, usage = os.wait4(proc.pid, 0)  # per-child rusage, unlike RUSAGE_CHILDREN's running max
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not out_path.is_file():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        raise SystemExit(f"{tag} failed (exit {proc.returncode}); last lines of {log_path}:\n"
                         + "\n".join(tail))
    result = json.loads(out_path.read_text())
    result["ru_maxrss_mb"] = usage.ru_maxrss / 1024
    result["wall_s"] = time.perf_counter() - started
    result["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    return result



@dataclass
class Runs:
    """Every child's result, and the install sizes, of one run."""

    seed: dict
    seed_funnel: dict
    f_ingest: dict
    f_none: dict
    f_rerank: dict
    f_langchain: dict
    f_default: dict
    check: dict
    dists: dict
    seed_venv: Path
    install_seed: float
    install_seed_funnel: float
    install_funnel: dict
    freeze: list[str]


def run_systems(args, spec: dict, work: Path) -> Runs:
    """The processes one after another (seed first), then the cross-encoder check and the install sizes."""
    seed = run_child(args.seed_python, "seed", spec, work, args.threads)
    seed_funnel = run_child(args.seed_python, "seed-funnel", spec, work, args.threads)
    f_ingest = run_child(sys.executable, "funnel-ingest", spec, work, args.threads)
    f_none = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "none"}, work, args.threads,
                       "funnel-query-none")
    f_rerank = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "builtin"}, work, args.threads,
                         "funnel-query-builtin")
    f_langchain = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "builtin", "langchain": True},
                            work, args.threads, "funnel-query-langchain")
    f_default = run_child(sys.executable, "funnel-query", {**spec, "funnel_reranker": "default"}, work, args.threads,
                          "funnel-query-default")
    (work / "check-pairs.json").write_text(json.dumps(f_rerank["check"]))
    torch_check = run_child(args.seed_python, "seed-check", {**spec, "check_file": str(work / "check-pairs.json")},
                            work, args.threads)
    check = check_cross_encoder(args.cross_encoder, f_rerank["check"], torch_check["logits"], work, args.threads,
                                spec["max_length"])
    seed_venv = Path(args.seed_python).parents[1]
    dists = run_child(args.seed_python, "seed-dists", spec, work, args.threads)
    install_seed = site_packages_mb(seed_venv, frozenset(dists["not_seed"]))
    install_seed_funnel = site_packages_mb(seed_venv)
    install_funnel = funnel_install(args.refresh_install_size)
    freeze = subprocess.run([args.seed_python, "-m", "pip", "freeze"], capture_output=True, text=True,
                            check=False).stdout.split()
    return Runs(seed, seed_funnel, f_ingest, f_none, f_rerank, f_langchain, f_default, check, dists, seed_venv,
                install_seed, install_seed_funnel, install_funnel, freeze)
