"""SWE-bench Lite file corpora from PyPI source releases (for file-level localisation).

    .venv/bin/python bench/swebench_corpus.py                      # all 12 repos, 300 instances
    .venv/bin/python bench/swebench_corpus.py --repos requests,flask --max-instances-per-repo 2
    .venv/bin/python bench/swebench_corpus.py --offline            # cache only, no network

For each instance (repo, version) this picks a PyPI release of the repo's project, downloads its
sdist once, and extracts the source files into CACHE/corpora/<repo-slug>-<release>/ with the
sdist's top-level `NAME-X/` folder stripped, so paths look like the repository
(`django/db/models/query.py`, `src/_pytest/python.py`). CACHE defaults to ~/.cache/funnel/swebench.
It writes CACHE/manifest.json and prints a summary table.

Release choice: the highest final release whose version equals `version` or starts with
`version + "."` (compared as release tuples, so xarray's "2022.03" matches "2022.3.0"); when the
series was never released (pytest "6.3"), the lowest final release above it. `--pick first` takes the
lowest release of the series instead (closer in time to the development commits).

Approximation: a SWE-bench instance sits at a development commit *before* its version was released,
while the corpus is the released sdist. Files added/removed/renamed in between, and files an sdist
leaves out, make the corpus differ from the repository at base_commit; `gold_present` says per
instance whether the gold file is in the corpus.

Download: by default the release files are listed and fetched with pip's own finder and HTTP session
(pip's configuration: indexes, find-links, certificates), and checked against the index's sha256.
`pip download --no-binary :all:` is not used by default because pip prepares metadata for every
sdist it downloads, i.e. runs the project's setup.py / build backend after installing its build
dependencies *from source* (numpy, Cython ... for scikit-learn): slow, CPU-heavy, and it fails for
old sdists on a current Python (requests 2.3's setup.py imports `collections.Mapping`).
`--backend cli` uses the pip command line instead (`pip index versions`, `pip download
--no-build-isolation`), falling back to the wheel when the sdist cannot be fetched.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INSTANCES = REPO_ROOT.parent / "shared" / "datasets" / "swe-bench-lite" / "instances.jsonl"
DEFAULT_CACHE = Path.home() / ".cache" / "funnel" / "swebench"

REPO_TO_PROJECT = {
    "astropy/astropy": "astropy",
    "django/django": "Django",
    "matplotlib/matplotlib": "matplotlib",
    "mwaskom/seaborn": "seaborn",
    "pallets/flask": "Flask",
    "psf/requests": "requests",
    "pydata/xarray": "xarray",
    "pylint-dev/pylint": "pylint",
    "pytest-dev/pytest": "pytest",
    "scikit-learn/scikit-learn": "scikit-learn",
    "sphinx-doc/sphinx": "Sphinx",
    "sympy/sympy": "sympy",
}

TEST_DIRS = frozenset({"tests", "test", "testing"})
TEST_FILE = re.compile(r"^(test_.*\.py|.*_test\.py|conftest\.py)$")
DEF_LINE = re.compile(rb"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+\w", re.MULTILINE)
TOP_DEF_LINE = re.compile(rb"^(?:async[ \t]+def|def|class)[ \t]+\w", re.MULTILINE)
SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
INDEX_FORMAT = 2
CORPUS_FORMAT = 2

log = logging.getLogger("swebench_corpus")


# --------------------------------------------------------------------------- instances


def load_instances(path: Path, repos: set[str] | None, per_repo: int) -> list[dict]:
    out: list[dict] = []
    seen: Counter[str] = Counter()
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            repo = rec["repo"]
            if repos and repo not in repos and repo.split("/")[-1] not in repos:
                continue
            if per_repo and seen[repo] >= per_repo:
                continue
            seen[repo] += 1
            out.append({k: rec[k] for k in ("instance_id", "repo", "version", "base_commit", "created_at", "gold_files")})
    return out


def repo_slug(repo: str) -> str:
    return repo.replace("/", "__")


# --------------------------------------------------------------------------- release choice


def _final(v: Version) -> bool:
    return not (v.is_prerelease or v.is_devrelease)


def _series_key(v: Version, n: int) -> tuple[int, ...]:
    rel = tuple(v.release) + (0,) * max(0, n - len(v.release))
    return rel[:n]


def choose_release(series: str, versions: list[str], yanked: set[str] = frozenset(), pick: str = "highest"
                   ) -> tuple[str | None, str]:
    """Pick the release for a SWE-bench `version` string. Returns (release, reason)."""
    parsed: list[tuple[Version, str]] = []
    for s in versions:
        try:
            v = Version(s)
        except InvalidVersion:
            continue
        if _final(v):
            parsed.append((v, s))
    live = [p for p in parsed if p[1] not in yanked] or parsed
    if not live:
        return None, "no final releases listed"
    want = Version(series)
    prefix = tuple(want.release)
    in_series = sorted(p for p in live if _series_key(p[0], len(prefix)) == prefix)
    if in_series:
        v, s = in_series[-1] if pick == "highest" else in_series[0]
        span = f"{in_series[0][1]}..{in_series[-1][1]}" if len(in_series) > 1 else in_series[0][1]
        return s, f"{pick} of {len(in_series)} final release(s) in series {series} ({span})"
    after = sorted(p for p in live if p[0] >= want)
    if after:
        v, s = after[0]
        return s, f"no {series}.x release on the index; nearest final release after it"
    v, s = max(live)
    return s, f"no release at or after {series}; latest release before it (UNRELIABLE)"


def choose_release_by_date(series: str, created_at: str, idx: ProjectIndex) -> tuple[str | None, str] | None:
    """First final release of the series uploaded at/after the instance's created_at; if the whole
    series was out before it (the instance is in development of the next version), the lowest later
    release uploaded after it. None when the index gave no upload times."""
    dated = []
    for s in idx.files:
        try:
            v = Version(s)
        except InvalidVersion:
            continue
        when = idx.released(s)
        if _final(v) and when and s not in idx.yanked:
            dated.append((v, s, when))
    if not dated:
        return None
    prefix = tuple(Version(series).release)
    in_series = sorted(d for d in dated if _series_key(d[0], len(prefix)) == prefix)
    later = [d for d in in_series if d[2] >= created_at]
    if later:
        v, s, when = later[0]
        return s, f"first {series}.x release uploaded after the issue ({when[:10]} >= {created_at[:10]})"
    after = sorted(d for d in dated if d[0] > Version(series) and _series_key(d[0], len(prefix)) > prefix
                   and d[2] >= created_at)
    if after:
        v, s, when = after[0]
        why = f"all {series}.x releases predate the issue" if in_series else f"no {series}.x release"
        return s, f"{why}; lowest later release uploaded after it ({when[:10]})"
    return None


# --------------------------------------------------------------------------- index / download backends


@dataclass
class ReleaseFile:
    filename: str
    url: str
    sha256: str | None
    is_wheel: bool
    yanked: bool
    upload_time: str | None = None  # ISO 8601, when the index serves PEP 700 metadata

    @property
    def is_sdist(self) -> bool:
        return not self.is_wheel and self.filename.lower().endswith(SDIST_SUFFIXES)


@dataclass
class ProjectIndex:
    project: str
    files: dict[str, list[ReleaseFile]]  # version string -> files (empty list for the CLI backend)
    fetched_at: float = 0.0

    @property
    def yanked(self) -> set[str]:
        return {v for v, fs in self.files.items() if fs and all(f.yanked for f in fs)}

    def released(self, version: str) -> str | None:
        """Earliest upload time of a version's files (ISO 8601), if the index said."""
        times = [f.upload_time for f in self.files.get(version, []) if f.upload_time]
        return min(times) if times else None

    def to_json(self) -> dict:
        return {"format": INDEX_FORMAT, "project": self.project, "fetched_at": self.fetched_at,
                "files": {v: [f.__dict__ for f in fs] for v, fs in self.files.items()}}

    @classmethod
    def from_json(cls, d: dict) -> ProjectIndex:
        return cls(d["project"], {v: [ReleaseFile(**f) for f in fs] for v, fs in d["files"].items()},
                   d.get("fetched_at", 0.0))


class PipApiBackend:
    """pip's finder + session, configured from pip's own config files and environment."""

    name = "pip-api"

    def __init__(self) -> None:
        from pip._internal.commands import create_command

        logging.getLogger("pip").setLevel(logging.ERROR)  # e.g. "Location ... is ignored" for absent mirror dirs
        self._cmd = create_command("download")
        self._options, _ = self._cmd.parse_args(["--no-deps", "placeholder"])
        self._ctx = self._cmd.main_context()
        self._ctx.__enter__()
        self._session = self._cmd.get_default_session(self._options)
        self._finder = self._cmd._build_package_finder(
            options=self._options, session=self._session, ignore_requires_python=True)

    def index(self, project: str) -> ProjectIndex:
        files: dict[str, list[ReleaseFile]] = defaultdict(list)
        seen: set[str] = set()
        for cand in self._finder.find_all_candidates(project):
            link = cand.link
            if link.filename in seen:
                continue
            seen.add(link.filename)
            sha = link.hash if link.hash_name == "sha256" else None
            up = getattr(link, "upload_time", None)
            files[str(cand.version)].append(ReleaseFile(
                link.filename, link.url_without_fragment, sha, link.is_wheel, bool(link.is_yanked),
                up.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if up else None))
        return ProjectIndex(project, dict(files), time.time())

    def download(self, project: str, release: str, idx: ProjectIndex, dest: Path) -> tuple[Path, str]:
        fs = [f for f in idx.files.get(release, []) if not f.yanked] or idx.files.get(release, [])
        sdists = sorted((f for f in fs if f.is_sdist),
                        key=lambda f: next(i for i, s in enumerate(SDIST_SUFFIXES) if f.filename.lower().endswith(s)))
        wheels = sorted((f for f in fs if f.is_wheel), key=lambda f: ("none-any" not in f.filename, f.filename))
        for kind, choice in (("sdist", sdists), ("wheel", wheels)):
            if not choice:
                continue
            f = choice[0]
            target = dest / f.filename
            if not (target.exists() and (f.sha256 is None or sha256_file(target) == f.sha256)):
                self._fetch(f, target)
            return target, kind
        raise RuntimeError(f"{project}=={release}: no sdist or wheel on the index")

    def _fetch(self, f: ReleaseFile, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".part{os.getpid()}")
        h = hashlib.sha256()
        try:
            resp = self._session.get(f.url, stream=True, headers={"Accept-Encoding": "identity"})
            resp.raise_for_status()
            with tmp.open("wb") as out:
                for chunk in resp.iter_content(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
            if f.sha256 and h.hexdigest() != f.sha256:
                raise RuntimeError(f"{f.filename}: sha256 mismatch ({h.hexdigest()} != {f.sha256})")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


class PipCliBackend:
    """`pip index versions` + `pip download` subprocesses (runs sdist metadata hooks; see module doc)."""

    name = "pip-cli"

    def __init__(self, timeout: float = 900) -> None:
        self._timeout = timeout

    def _pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", *args], check=False, capture_output=True, text=True,
                              timeout=self._timeout)

    def index(self, project: str) -> ProjectIndex:
        r = self._pip("index", "versions", "--json", "--ignore-requires-python", project)
        if r.returncode != 0:
            raise RuntimeError(f"pip index versions {project}: {r.stderr.strip()[-500:]}")
        data = json.loads(r.stdout)
        return ProjectIndex(project, {v: [] for v in data.get("versions", [])}, time.time())

    def download(self, project: str, release: str, idx: ProjectIndex, dest: Path) -> tuple[Path, str]:
        dest.mkdir(parents=True, exist_ok=True)
        spec = f"{project}=={release}"
        attempts = (
            ("sdist", ["--no-binary", ":all:", "--no-build-isolation"]),
            ("wheel", ["--only-binary", ":all:", "--ignore-requires-python"]),
        )
        errors = []
        for kind, extra in attempts:
            with tempfile.TemporaryDirectory(dir=dest) as tmp:
                r = self._pip("download", "--no-deps", *extra, spec, "-d", tmp)
                got = [p for p in Path(tmp).iterdir() if p.is_file()]
                if r.returncode == 0 and got:
                    target = dest / got[0].name
                    os.replace(got[0], target)
                    return target, kind
                errors.append(f"{kind}: {r.stderr.strip()[-300:]}")
        raise RuntimeError(f"pip download {spec} failed: " + " | ".join(errors))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cached_archive(dest: Path, project: str, release: str, idx: ProjectIndex | None) -> tuple[Path, str] | None:
    """An archive for project==release already in dest (sdist preferred)."""
    if idx is not None and idx.files.get(release):
        for f in sorted(idx.files[release], key=lambda f: not f.is_sdist):
            p = dest / f.filename
            if p.exists() and (f.sha256 is None or sha256_file(p) == f.sha256):
                return p, "sdist" if f.is_sdist else "wheel"
    # CLI backend / offline: match by normalised file name
    norm = canonicalize_name(project).replace("-", "_")
    rel = str(Version(release))
    hits = []
    for p in dest.glob("*") if dest.exists() else []:
        low = p.name.lower()
        if ".part" in low or not p.is_file():
            continue
        for sep in ("-", "_"):
            stem = norm.replace("_", sep)
            if low.startswith(f"{stem}-".lower()):
                tail = p.name[len(stem) + 1:]
                ver = tail.split("-")[0]
                for suf in SDIST_SUFFIXES:
                    if ver.lower().endswith(suf):
                        ver = ver[: -len(suf)]
                try:
                    if str(Version(ver)) == rel:
                        hits.append(p)
                except InvalidVersion:
                    pass
    hits.sort(key=lambda p: p.suffix == ".whl")
    if hits:
        return hits[0], "wheel" if hits[0].suffix == ".whl" else "sdist"
    return None


# --------------------------------------------------------------------------- extraction


@dataclass
class Settings:
    exts: tuple[str, ...]
    max_file_bytes: int
    skip_tests: bool

    def key(self) -> dict:
        return {"format": CORPUS_FORMAT, "exts": list(self.exts), "max_file_bytes": self.max_file_bytes,
                "skip_tests": self.skip_tests}


@dataclass
class ExtractStats:
    files: int = 0
    bytes: int = 0
    lines: int = 0
    defs: int = 0  # lines starting a def/class (any depth) in .py files: a rough chunk count
    top_defs: int = 0  # module-level def/class only
    newest_mtime: int = 0  # newest archive member time: roughly when the release was built
    skipped: Counter = field(default_factory=Counter)
    test_rules: Counter = field(default_factory=Counter)  # which rule removed the test files

    def to_json(self) -> dict:
        return {"files": self.files, "bytes": self.bytes, "lines": self.lines, "defs": self.defs,
                "top_defs": self.top_defs, "newest_member": time.strftime("%Y-%m-%d", time.gmtime(self.newest_mtime)),
                "skipped": dict(self.skipped), "skipped_tests_by_rule": dict(self.test_rules)}


def test_rule(rel: PurePosixPath) -> str | None:
    """Which test rule matches rel: 'dir:tests' / 'dir:test' / 'dir:testing' / 'file', else None."""
    for p in rel.parts[:-1]:
        if p in TEST_DIRS:
            return f"dir:{p}"
    return "file" if TEST_FILE.match(rel.name) else None


def is_test_path(rel: PurePosixPath) -> bool:
    return test_rule(rel) is not None


def safe_relpath(name: str) -> PurePosixPath | None:
    """Archive member name -> relative path, or None if it could escape (absolute, '..', drive)."""
    name = name.replace("\\", "/")
    if not name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return PurePosixPath(*parts)


def _strip_top(names: list[PurePosixPath], wheel: bool) -> int:
    """How many leading components to strip: 1 when everything sits under one `NAME-X/` folder."""
    if wheel or not names:
        return 0
    tops = {n.parts[0] for n in names}
    return 1 if len(tops) == 1 and all(len(n.parts) > 1 for n in names) else 0


def _select(rel: PurePosixPath, size: int, settings: Settings, stats: ExtractStats) -> bool:
    if not rel.name.lower().endswith(settings.exts):
        stats.skipped["other_ext"] += 1
        return False
    rule = test_rule(rel) if settings.skip_tests else None
    if rule:
        stats.skipped["tests"] += 1
        stats.test_rules[rule] += 1
        return False
    if size > settings.max_file_bytes:
        stats.skipped["too_large"] += 1
        return False
    return True


def _account(path: Path, stats: ExtractStats) -> None:
    data = path.read_bytes()
    stats.files += 1
    stats.bytes += len(data)
    stats.lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    if path.suffix == ".py":
        stats.defs += len(DEF_LINE.findall(data))
        stats.top_defs += len(TOP_DEF_LINE.findall(data))


def _inside(root: Path, rel: PurePosixPath) -> Path:
    target = (root / Path(*rel.parts)).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"refusing to write outside the corpus: {rel}")
    return target


def extract_corpus(archive: Path, out: Path, settings: Settings, wheel: bool) -> ExtractStats:
    """Extract the selected source files of archive into out (which must not exist yet)."""
    stats = ExtractStats()
    out.mkdir(parents=True)
    root = out.resolve()
    if archive.name.lower().endswith((".zip", ".whl")):
        with zipfile.ZipFile(archive) as zf:
            infos = []
            for zi in zf.infolist():
                if zi.is_dir():
                    continue
                ftype = stat.S_IFMT(zi.external_attr >> 16)  # 0 for archives made without unix modes
                if ftype and ftype != stat.S_IFREG:
                    stats.skipped["not_regular"] += 1
                    continue
                rel = safe_relpath(zi.filename)
                if rel is None:
                    stats.skipped["unsafe_path"] += 1
                    continue
                infos.append((rel, zi))
                stats.newest_mtime = max(stats.newest_mtime, int(time.mktime(zi.date_time + (0, 0, -1))))
            strip = _strip_top([r for r, _ in infos], wheel)
            for rel, zi in infos:
                rel = PurePosixPath(*rel.parts[strip:])
                if not _select(rel, zi.file_size, settings, stats):
                    continue
                target = _inside(root, rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(zi) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                _account(target, stats)
        return stats

    if not hasattr(tarfile, "data_filter"):
        raise RuntimeError("this Python's tarfile has no extraction filters (need 3.11.4+ / 3.12+)")
    with tarfile.open(archive, "r:*") as tf:
        members = []
        for m in tf:  # streaming; keeps memory flat for the big sdists
            if m.isdir():
                continue
            if not m.isfile():
                stats.skipped["not_regular"] += 1
                continue
            rel = safe_relpath(m.name)
            if rel is None:
                stats.skipped["unsafe_path"] += 1
                continue
            members.append((rel, m))
            stats.newest_mtime = max(stats.newest_mtime, int(m.mtime))
        strip = _strip_top([r for r, _ in members], wheel)
        for rel, m in members:
            rel = PurePosixPath(*rel.parts[strip:])
            if not _select(rel, m.size, settings, stats):
                continue
            target = _inside(root, rel)
            # filter="data" rejects absolute/'..' names, links and special files and clears odd mode bits
            tf.extract(m.replace(name=str(rel), deep=False), root, filter="data")
            _account(target, stats)
    return stats


# --------------------------------------------------------------------------- driver


class Builder:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache: Path = args.cache.expanduser()
        self.settings = Settings(tuple(sorted(set(args.ext))), args.max_file_bytes, args.skip_tests)
        self._backend = None
        self.downloaded_bytes = 0
        self.downloads = 0
        self.download_s = 0.0
        self.extract_s = 0.0
        self.errors: list[str] = []

    @property
    def backend(self):
        if self.args.offline:
            raise RuntimeError("--offline: not in the cache")
        if self._backend is None:
            if self.args.backend == "api":
                try:
                    self._backend = PipApiBackend()
                except Exception as e:  # noqa: BLE001 - pip internals moved: fall back to the command line
                    log.warning("pip API backend unavailable (%s: %s); using the pip CLI", type(e).__name__, e)
                    self._backend = PipCliBackend()
            else:
                self._backend = PipCliBackend()
        return self._backend

    # -- index
    def project_index(self, project: str) -> ProjectIndex:
        path = self.cache / "index" / f"{canonicalize_name(project)}.json"
        if path.exists() and not self.args.refresh_index:
            d = json.loads(path.read_text())
            if d.get("format") == INDEX_FORMAT:
                return ProjectIndex.from_json(d)
        idx = self.backend.index(project)
        if not idx.files:
            raise RuntimeError(f"{project}: the index lists no versions")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, idx.to_json())
        return idx

    # -- one corpus
    def corpus(self, repo: str, project: str, release: str, idx: ProjectIndex) -> dict:
        name = f"{repo_slug(repo)}-{release}"
        cdir = self.cache / "corpora" / name
        meta_path = self.cache / "corpora" / f"{name}.json"
        if cdir.is_dir() and meta_path.exists():
            meta = json.loads(meta_path.read_text())
            if meta.get("settings") == self.settings.key():
                return meta
            log.info("%s: extraction settings changed, rebuilding", name)
        sdists = self.cache / "sdists"
        hit = cached_archive(sdists, project, release, idx)
        if hit is None:
            t0 = time.perf_counter()
            archive, source = self.backend.download(project, release, idx, sdists)
            self.download_s += time.perf_counter() - t0
            self.downloads += 1
            self.downloaded_bytes += archive.stat().st_size
            log.info("downloaded %s (%.1f MB, %.1fs)", archive.name, archive.stat().st_size / 1e6,
                     time.perf_counter() - t0)
        else:
            archive, source = hit
        if source == "wheel":
            log.warning("%s==%s: no sdist, using the wheel %s (installed layout, e.g. no src/ prefix)",
                        project, release, archive.name)
        t0 = time.perf_counter()
        tmp = self.cache / "corpora" / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            stats = extract_corpus(archive, tmp, self.settings, wheel=source == "wheel")
            shutil.rmtree(cdir, ignore_errors=True)
            os.replace(tmp, cdir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.extract_s += time.perf_counter() - t0
        meta = {"name": name, "repo": repo, "project": project, "release": release,
                "archive": archive.name, "archive_bytes": archive.stat().st_size,
                "archive_sha256": sha256_file(archive), "source": source,
                "settings": self.settings.key(), **stats.to_json()}
        write_json(meta_path, meta)
        log.info("extracted %s: %d files, %d lines (%.1fs)", name, stats.files, stats.lines,
                 time.perf_counter() - t0)
        return meta

    def run(self, instances: list[dict]) -> dict:
        by_repo: dict[str, list[dict]] = defaultdict(list)
        for inst in instances:
            by_repo[inst["repo"]].append(inst)
        rows: list[dict] = []
        corpora: dict[str, dict] = {}
        releases: dict[str, dict] = {}
        for repo, insts in sorted(by_repo.items()):
            project = REPO_TO_PROJECT.get(repo)
            if project is None:
                self.errors.append(f"{repo}: no PyPI project mapped")
                rows += [self._row(i, None, None, None, None, None, "unmapped repo") for i in insts]
                continue
            try:
                idx = self.project_index(project)
            except Exception as e:  # noqa: BLE001 - record per repo, go on with the others
                self.errors.append(f"{repo}: index: {e}")
                rows += [self._row(i, project, None, None, None, None, f"index: {e}") for i in insts]
                continue
            # release per instance (per series unless --pick date), then one corpus per release
            choice: dict[str, tuple[str | None, str]] = {}
            for inst in insts:
                got = None
                if self.args.pick == "date":
                    got = choose_release_by_date(inst["version"], inst.get("created_at") or "", idx)
                if got is None:
                    pick = "first" if self.args.pick == "first" else "highest"
                    got = choose_release(inst["version"], list(idx.files), idx.yanked, pick)
                choice[inst["instance_id"]] = got
            releases[repo] = {}
            for inst in sorted(insts, key=lambda i: Version(i["version"])):
                rel, why = choice[inst["instance_id"]]
                key = inst["version"] if self.args.pick != "date" else f"{inst['version']} ({inst['instance_id']})"
                releases[repo][key] = {"project": project, "release": rel, "reason": why,
                                       "released": idx.released(rel) if rel else None}
            built: dict[str, tuple[dict | None, str | None]] = {}
            for rel in sorted({r for r, _ in choice.values() if r}, key=Version):
                try:
                    meta = self.corpus(repo, project, rel, idx)
                    corpora[meta["name"]] = meta
                    built[rel] = (meta, None)
                except Exception as e:  # noqa: BLE001 - record per release, go on with the others
                    built[rel] = (None, f"{type(e).__name__}: {e}")
                    self.errors.append(f"{repo} {rel}: {built[rel][1]}")
            for inst in insts:
                rel, why = choice[inst["instance_id"]]
                meta, err = built.get(rel, (None, why if rel is None else None))
                rows.append(self._row(inst, project, rel, why, idx.released(rel) if rel else None, meta, err))
            self._explain_missing([r for r in rows if r["repo"] == repo], corpora)
        return {"rows": rows, "corpora": corpora, "releases": releases}

    def _row(self, inst, project, release, reason, released, meta, err) -> dict:
        row = {"instance_id": inst["instance_id"], "repo": inst["repo"], "version": inst["version"],
               "created_at": inst.get("created_at"), "project": project, "release": release,
               "release_reason": reason, "release_uploaded": released,
               "corpus_dir": None, "gold_files": inst["gold_files"], "gold_present": False,
               "n_files": 0, "source": None}
        if meta is not None:
            cdir = self.cache / "corpora" / meta["name"]
            row.update(corpus_dir=str(cdir), n_files=meta["files"], source=meta["source"],
                       gold_present=all((cdir / g).is_file() for g in inst["gold_files"]))
        if err:
            row["error"] = err
        return row

    def _explain_missing(self, rows: list[dict], corpora: dict[str, dict]) -> None:
        """Best-effort note for a gold file absent from its corpus (hints, not proof)."""
        for row in rows:
            if row["gold_present"] or not row["corpus_dir"]:
                continue
            notes = []
            for g in row["gold_files"]:
                rel = PurePosixPath(g)
                if (self.settings.skip_tests and is_test_path(rel)) or not g.lower().endswith(self.settings.exts):
                    notes.append(f"{g}: removed by the extraction rules")
                    continue
                cdir = Path(row["corpus_dir"])
                if rel.suffix == ".py" and (cdir / rel.with_suffix("") / "__init__.py").is_file():
                    notes.append(f"{g}: this release has the package {rel.with_suffix('')}/ instead")
                elif rel.suffix == ".py" and (cdir / rel.with_suffix("") / rel.name).is_file():
                    notes.append(f"{g}: this release has {rel.with_suffix('') / rel.name} instead")
                elif rel.name == "__init__.py" and (cdir / f"{rel.parent}.py").is_file():
                    notes.append(f"{g}: this release has the module {rel.parent}.py instead")
                have = sorted((c["release"] for c in corpora.values()
                               if c["repo"] == row["repo"] and (self.cache / "corpora" / c["name"] / g).is_file()),
                              key=Version)
                if have:
                    notes.append(f"{g} is in the built {row['repo']} release(s) {', '.join(have)}")
                elif not any(n.startswith(g) for n in notes):
                    notes.append(f"{g} is in none of the built {row['repo']} releases")
            row["gold_note"] = "; ".join(notes)


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def merge_manifest(path: Path, result: dict, settings: Settings, pick: str) -> dict:
    """Merge this run into an existing manifest (same settings and --pick), so --repos runs accumulate."""
    old = {}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = {}
    if old.get("settings") != settings.key() or old.get("pick", "highest") != pick:
        old = {}
    inst = {r["instance_id"]: r for r in old.get("instances", [])}
    inst.update({r["instance_id"]: r for r in result["rows"]})
    corpora = {**old.get("corpora", {}), **result["corpora"]}
    releases = {**old.get("releases", {}), **result["releases"]}
    used = {Path(r["corpus_dir"]).name for r in inst.values() if r.get("corpus_dir")}
    return {
        "settings": settings.key(),
        "pick": pick,
        "instances": sorted(inst.values(), key=lambda r: r["instance_id"]),
        "corpora": {k: v for k, v in sorted(corpora.items()) if k in used},
        "releases": dict(sorted(releases.items())),
    }


def print_summary(manifest: dict, only_repos: set[str] | None, out=sys.stdout) -> None:
    rows = [r for r in manifest["instances"] if not only_repos or r["repo"] in only_repos]
    corpora = manifest["corpora"]
    by_repo: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_repo[r["repo"]].append(r)
    hdr = f"{'repo':28} {'inst':>5} {'rel':>4} {'gold present':>14} {'files':>8} {'lines':>11} {'defs':>9}"
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    tot = Counter()
    for repo, rs in sorted(by_repo.items()):
        names = sorted({Path(r["corpus_dir"]).name for r in rs if r.get("corpus_dir")})
        files = sum(corpora[n]["files"] for n in names if n in corpora)
        lines = sum(corpora[n]["lines"] for n in names if n in corpora)
        defs = sum(corpora[n]["defs"] for n in names if n in corpora)
        ok = sum(r["gold_present"] for r in rs)
        print(f"{repo:28} {len(rs):5d} {len(names):4d} {ok:5d} ({100 * ok / len(rs):5.1f}%) {files:8d} {lines:11,d} "
              f"{defs:9,d}", file=out)
        tot.update(inst=len(rs), rel=len(names), ok=ok, files=files, lines=lines, defs=defs)
    print("-" * len(hdr), file=out)
    n = max(tot["inst"], 1)
    print(f"{'total':28} {tot['inst']:5d} {tot['rel']:4d} {tot['ok']:5d} ({100 * tot['ok'] / n:5.1f}%) "
          f"{tot['files']:8d} {tot['lines']:11,d} {tot['defs']:9,d}", file=out)

    print("\nper corpus (files/lines/defs after filtering; skipped = files removed by each rule):", file=out)
    used = Counter(Path(r["corpus_dir"]).name for r in rows if r.get("corpus_dir"))
    for name in sorted(used):
        c = corpora.get(name)
        if not c:
            continue
        sk = c["skipped"]
        print(f"  {name:40} {c['source']:5} {used[name]:3d} inst {c['files']:6d} files {c['lines']:10,d} lines "
              f"{c['defs']:7,d} defs ({c['top_defs']:6,d} top) {c['bytes'] / 1e6:5.1f} MB | archive {c['archive_bytes'] / 1e6:5.1f} MB | "
              f"skipped tests {sk.get('tests', 0)}, >max {sk.get('too_large', 0)}, other ext {sk.get('other_ext', 0)}",
              file=out)
    print("\nrelease choices:", file=out)
    for repo, series in manifest["releases"].items():
        if only_repos and repo not in only_repos:
            continue
        for s, ch in series.items():
            up = (ch.get("released") or "?")[:10]
            print(f"  {repo:26} {s:8} -> {ch['release']!s:12} (uploaded {up}) {ch['reason']}", file=out)
    missing = [r for r in rows if not r["gold_present"]]
    if missing:
        print(f"\ngold file not in the corpus ({len(missing)}):", file=out)
        for r in missing:
            why = r.get("error") or r.get("gold_note") or "not in this release's sdist"
            print(f"  {r['instance_id']:30} v{r['version']:5} issue {(r.get('created_at') or '?')[:10]} -> "
                  f"{r['release']!s} (uploaded {(r.get('release_uploaded') or '?')[:10]}): {why}", file=out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=Path, default=DEFAULT_INSTANCES, help="SWE-bench Lite instances.jsonl")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="cache root (default %(default)s)")
    p.add_argument("--repos", default="", help="comma-separated repos, full (psf/requests) or short (requests)")
    p.add_argument("--max-instances-per-repo", type=int, default=0, help="0 = all")
    p.add_argument("--ext", action="append", default=[".py"],
                   help="file suffix to keep, repeatable or comma-separated (.py is always kept)")
    p.add_argument("--max-file-bytes", type=int, default=1_000_000, help="skip larger files (default 1 MB)")
    p.add_argument("--skip-tests", action=argparse.BooleanOptionalAction, default=True,
                   help="skip tests/, test/, testing/ dirs and test_*.py, *_test.py, conftest.py (default on)")
    p.add_argument("--pick", choices=("highest", "first", "date"), default="highest",
                   help="highest (default) or first release of the matching series; date: per instance, the first "
                        "release of the series uploaded after the issue was created, else the next later release")
    p.add_argument("--backend", choices=("api", "cli"), default="api",
                   help="api: pip's finder/session, no sdist code run (default); cli: pip index/download commands")
    p.add_argument("--refresh-index", action="store_true", help="re-query the index even if cached")
    p.add_argument("--offline", action="store_true", help="use only the cache; fail what is not cached")
    p.add_argument("--manifest", type=Path, default=None, help="default CACHE/manifest.json")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    args.ext = [e if e.startswith(".") else f".{e}" for raw in args.ext for e in raw.split(",") if e]
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)

    repos = {r.strip() for r in args.repos.split(",") if r.strip()} or None
    instances = load_instances(args.instances, repos, args.max_instances_per_repo)
    if not instances:
        print(f"no instances selected from {args.instances}", file=sys.stderr)
        return 2
    only = {i["repo"] for i in instances}
    t0 = time.perf_counter()
    b = Builder(args)
    result = b.run(instances)
    manifest_path = args.manifest or b.cache / "manifest.json"
    manifest = merge_manifest(manifest_path, result, b.settings, args.pick)
    write_json(manifest_path, manifest)
    print_summary(manifest, only)
    print(f"\n{len(instances)} instances, {len(result['corpora'])} corpora; downloaded {b.downloads} archive(s), "
          f"{b.downloaded_bytes / 1e6:.1f} MB in {b.download_s:.1f}s; extraction {b.extract_s:.1f}s; "
          f"total {time.perf_counter() - t0:.1f}s; manifest {manifest_path}")
    for e in b.errors:
        print(f"ERROR {e}", file=sys.stderr)
    return 1 if b.errors else 0


if __name__ == "__main__":
    sys.exit(main())
