"""Crash consistency: `funnel ingest` stopped at random points, over and over, on one index.

Every round changes the sources (files added, edited, deleted), starts the real CLI (forked from a
server that has funnel imported: forked_cli.py), stops it at a random moment of the ingest's duration
(kill -9, Ctrl-C, or Ctrl-C twice), then checks the promises: the index opens and answers a fixed set
of queries exactly as the last committed version did (or as the new one, when the stop came after the
commit), the CLI said one line and no traceback, and the next ingest completes. Also a full disk and a
read-only index directory. The seed is printed; FUNNEL_CRASH_SEED replays one.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from forked_cli import Ended, ForkedCli
from tally import scale

from funnel.embed import load_embedder
from funnel.index import open_store

EMBEDDER = "hashing"
QUERIES = ["anvil robot", "river mountain cloud", "commit version table", "kernel thread lock", "zebra quartz"]
WORDS = ("alpha beta gamma delta anvil robot engine river mountain cloud server kernel thread lock commit "
         "version table index query vector zebra quartz maple cedar harbor signal token window ledger").split()


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    # BATCH=32: an ingest of a small corpus writes many table versions, so there are many points to stop at.
    server = ForkedCli(tmp_path_factory.mktemp("cli"), {"FUNNEL_EMBEDDER": EMBEDDER, "FORKED_CLI_BATCH": "32"})
    yield server
    server.close()


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FUNNEL_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    print(f"crash seed {seed} (FUNNEL_CRASH_SEED={seed} replays it)")
    return random.Random(seed)


@pytest.fixture(params=["lancedb", "postgres"])
def location(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_dsn")
    return str(tmp_path / "index")


def _store_name(location: str) -> str:
    return "postgres" if location.startswith("postgresql:") else "lancedb"


class Corpus:
    """Text files that change between rounds: some added, some edited, some deleted."""

    def __init__(self, root: Path, rng: random.Random, files: int = 30):
        self.root, self.rng, self._next = root, rng, 0
        root.mkdir(parents=True, exist_ok=True)
        for _ in range(files):
            self._write(self._new_name())

    def _new_name(self) -> Path:
        self._next += 1
        return self.root / f"doc{self._next:04d}.txt"

    def _write(self, path: Path) -> None:
        paragraphs = [" ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(40, 160)))
                      for _ in range(self.rng.randint(1, 6))]
        path.write_text(f"{path.stem}\n\n" + "\n\n".join(paragraphs) + "\n")

    def change(self) -> None:
        files = sorted(self.root.iterdir())
        for path in self.rng.sample(files, min(len(files), self.rng.randint(2, 6))):
            self._write(path)
        for path in self.rng.sample(files, min(len(files) - 5, self.rng.randint(0, 3))):
            path.unlink()
        for _ in range(self.rng.randint(1, 5)):
            self._write(self._new_name())


def _ranking(hits, n: int) -> tuple:
    """(chunk id, score) in rank order. When all `n` places are filled, the entries tied with the last
    one are cut: which of equal scores makes the cut may depend on the table's layout."""
    ranked = sorted(((h.chunk.chunk_id, round(h.score, 4)) for h in hits), key=lambda x: (-x[1], x[0]))
    if len(ranked) < n:
        return tuple(ranked)
    return tuple(r for r in ranked if r[1] != ranked[-1][1])


def snapshot(location: str) -> tuple:
    """What the index answers: every document's fingerprint, the counts, and a fixed set of queries:
    the dense ranking with its scores, and which chunks match the words. BM25's scores themselves are
    left out: Lance's full-text statistics count deleted rows until a compaction, so the same rows
    score a little differently before and after one (a commit compacts once its new state is written)."""
    store = open_store(location)
    try:
        info = store.info()
        if info is None:
            return ("empty",)
        embedder = load_embedder(EMBEDDER)
        answers = tuple(
            (tuple(sorted(h.chunk.chunk_id for h in store.search_lexical(q, 10_000))),
             _ranking(store.search_dense(embedder.embed([q])[0], 6), 6))
            for q in QUERIES
        )
        return info.chunks, info.documents, tuple(sorted(store.document_hashes().items())), answers
    finally:
        conn = getattr(store, "_conn", None)  # PgStore's reader connection (the store has no close())
        if conn is not None:
            conn.close()


def _difference(got: tuple, expected: tuple) -> str:
    if len(got) != len(expected):
        return f"{got} != {expected}"
    chunks, documents, hashes, answers = got
    if (chunks, documents) != expected[:2]:
        return f"{chunks} chunks in {documents} documents, not {expected[0]} in {expected[1]}"
    if hashes != expected[2]:
        return f"documents differ: {sorted(set(hashes) ^ set(expected[2]))[:4]}"
    for query, mine, theirs in zip(QUERIES, answers, expected[3]):
        if mine != theirs:
            return f"{query!r} is answered {mine}, not {theirs}"
    return "same"


def _said_one_line(ended: Ended) -> str | None:
    """What is wrong with how an interrupted CLI ended, or None."""
    for bad in ("Traceback", "terminate called", "Aborted"):
        if bad in ended.stderr + ended.stdout:
            return f"'{bad}' in its output: {ended.stderr[-300:]!r}"
    if ended.code == 130 and len(ended.stderr.strip().splitlines()) != 1:
        return f"exit 130 with {len(ended.stderr.strip().splitlines())} lines: {ended.stderr[-300:]!r}"
    return None


@dataclass
class Rounds:
    """Rounds of (change the sources, start an ingest, stop it, check, ingest to the end)."""

    cli: ForkedCli
    location: str
    corpus: Corpus
    rng: random.Random
    failures: list[str] = field(default_factory=list)
    finished_first: int = 0  # rounds whose ingest ended before the stop came

    def ingest(self, timeout: float = 120) -> Ended:
        return self.cli.run("ingest", str(self.corpus.root), "--index", self.location, "--no-calibrate",
                            timeout=timeout)

    def run(self, n: int, stop, allowed_codes: tuple[int, ...]) -> None:
        first = self.ingest()
        assert first.code == 0, f"the first ingest failed: {first.stderr[-500:]}"
        committed, duration = snapshot(self.location), first.seconds
        for i in range(n):
            self.corpus.change()
            at = self.rng.uniform(0.05, max(0.1, duration * 1.1))
            child = self.cli.start("ingest", str(self.corpus.root), "--index", self.location, "--no-calibrate")
            stop(child, at)
            ended = self.cli.wait(child, timeout=60)
            wrong = []
            # Python's own handler is gone while the interpreter shuts down: a Ctrl-C then ends the process
            # by SIGINT (the shell's 130), after the ingest finished and printed its report.
            if ended.code == -signal.SIGINT and " added, " in ended.stdout:
                ended = replace(ended, code=0)
            self.finished_first += ended.code == 0
            if ended.code not in allowed_codes:
                wrong.append(f"exit {ended.code}: {ended.stderr[-300:]!r}")
            if (said := _said_one_line(ended)) is not None:
                wrong.append(said)
            try:
                after = snapshot(self.location)
            except Exception as e:
                after = None
                wrong.append(f"the index does not open: {type(e).__name__}: {e}")
            done = self.ingest()
            if done.code != 0:
                wrong.append(f"the next ingest failed (exit {done.code}): {done.stderr[-300:]!r}")
            new = snapshot(self.location)
            if after is not None and after not in (committed, new):
                wrong.append(f"the index answers neither as the last commit did ({_difference(after, committed)}) "
                             f"nor as the next one does ({_difference(after, new)})")
            if wrong:
                self.failures.append(f"round {i} (stopped at {at:.2f}s of ~{duration:.2f}s): " + "; ".join(wrong))
            committed, duration = new, done.seconds


def _at(child, at: float) -> None:
    time.sleep(max(0.0, at - (time.monotonic() - child.started)))


def _kill9(child, at: float) -> None:
    _at(child, at)
    _signal(child.pid, signal.SIGKILL)


def _ctrl_c(child, at: float) -> None:
    _at(child, at)
    _signal(child.pid, signal.SIGINT)


def _ctrl_c_twice(rng: random.Random):
    def stop(child, at: float) -> None:
        _ctrl_c(child, at)
        time.sleep(rng.uniform(0.05, 0.5))
        _signal(child.pid, signal.SIGINT)

    return stop


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it ended (unreaped) before the stop came: a race the rounds allow
        pass


def _report(tally, target: str, rounds: Rounds, n: int, started: float) -> None:
    tally.add("crash", target, tried=n, failed=len(rounds.failures), seconds=round(time.monotonic() - started, 1),
              finished_first=rounds.finished_first)
    print(f"{target}: {n} rounds, {rounds.finished_first} ended before the stop came")
    assert not rounds.failures, f"{len(rounds.failures)} of {n} rounds broke a promise:\n" + "\n".join(rounds.failures)


def _stop_ingests(cli, location, rng, tmp_path, tally, n: int, stop, allowed_codes, what: str) -> None:
    """`n` rounds of an ingest stopped by `stop` at a random moment, then every promise checked."""
    started = time.monotonic()
    rounds = Rounds(cli, location, Corpus(tmp_path / "docs", rng), rng)
    rounds.run(n, stop, allowed_codes=allowed_codes)
    _report(tally, f"{what} during ingest ({_store_name(location)})", rounds, n, started)


@pytest.mark.slow
def test_kill_9_at_random_points_of_ingest(cli, location, rng, tmp_path, tally):
    _stop_ingests(cli, location, rng, tmp_path, tally, scale(20, 200), _kill9, (-signal.SIGKILL, 0), "kill -9")


@pytest.mark.slow
def test_ctrl_c_at_random_points_of_ingest(cli, location, rng, tmp_path, tally):
    _stop_ingests(cli, location, rng, tmp_path, tally, scale(3, 20), _ctrl_c, (130, 0), "Ctrl-C")


@pytest.mark.slow
def test_ctrl_c_twice_at_random_points_of_ingest(cli, location, rng, tmp_path, tally):
    _stop_ingests(cli, location, rng, tmp_path, tally, scale(3, 20), _ctrl_c_twice(rng), (130, 0), "Ctrl-C twice")


def _data_files(index: Path) -> set[str]:
    """Lance's data, deletion and index files (not the manifests, which a rollback adds one of)."""
    table = index / "chunks.lance"
    return {str(p.relative_to(table)) for sub in ("data", "_deletions", "_indices") for p in (table / sub).rglob("*")
            if p.is_file()}


@pytest.mark.slow
def test_ctrl_c_twice_exits_130_in_one_line_and_leaves_no_orphans(cli, rng, tmp_path, tally):
    """Issue 17, defect 1: a second Ctrl-C 0.5 s after the first ended in a C++ abort, and the rolled-back
    ingest's data stayed on disk for good. A real `funnel` process here, not a forked one."""
    import sys

    index = tmp_path / "index"
    corpus = Corpus(tmp_path / "docs", rng, files=10)
    assert cli.run("ingest", str(corpus.root), "--index", str(index), "--no-calibrate").code == 0
    committed, before = snapshot(str(index)), _data_files(index)
    for _ in range(150):  # several write batches of 256 chunks
        corpus._write(corpus._new_name())
    process = subprocess.Popen(
        [sys.executable, "-c", "from funnel.apps.cli import run; run()", "ingest", str(corpus.root), "--index",
         str(index), "--no-calibrate"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "FUNNEL_EMBEDDER": EMBEDDER},
    )
    deadline = time.monotonic() + 120
    while not _data_files(index) - before and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until the ingest has written a batch
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    ended = Ended(process.returncode, stdout, stderr, 0.0)
    tally.add("crash", "Ctrl-C twice, 0.5 s apart (lancedb, real process)", tried=1,
              failed=int(ended.code != 130 or _said_one_line(ended) is not None))
    assert ended.code == 130, f"exit {ended.code}: {stderr!r}"
    assert _said_one_line(ended) is None, _said_one_line(ended)
    assert stderr.startswith("interrupted")
    assert _data_files(index) <= before, f"left behind: {sorted(_data_files(index) - before)}"
    assert snapshot(str(index)) == committed


@contextmanager
def _read_only(path: Path):
    """`path` read-only for this process's children: a read-only bind mount for root (whom file modes
    do not stop), modes for anyone else."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _one_line_error(ended: Ended) -> str | None:
    lines = ended.stderr.strip().splitlines()
    if ended.code in (0, None) or len(lines) != 1 or not lines[0].startswith("error:") or "unexpected" in lines[0]:
        return f"exit {ended.code}, stderr {ended.stderr[-500:]!r}"
    return None


def test_read_only_index_is_one_line_and_loses_nothing(cli, location, rng, tmp_path, tally):
    corpus = Corpus(tmp_path / "docs", rng, files=10)
    assert cli.run("ingest", str(corpus.root), "--index", location, "--no-calibrate").code == 0
    committed = snapshot(location)
    corpus.change()
    if _store_name(location) == "postgres":
        import psycopg

        database = location.rsplit("/", 1)[1]
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {database} SET default_transaction_read_only = on")
        ended = cli.run("ingest", str(corpus.root), "--index", location, "--no-calibrate")
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f"ALTER DATABASE {database} RESET default_transaction_read_only")
    else:
        with _read_only(Path(location)):
            ended = cli.run("ingest", str(corpus.root), "--index", location, "--no-calibrate")
            after = snapshot(location)
        assert after == committed
    wrong = _one_line_error(ended)
    tally.add("crash", f"read-only index ({_store_name(location)})", tried=1, failed=int(wrong is not None))
    assert wrong is None, wrong
    assert snapshot(location) == committed
    assert cli.run("ingest", str(corpus.root), "--index", location, "--no-calibrate").code == 0


def _fill(disk: Path, leave: int) -> Path:
    """A file that takes all of `disk` but about `leave` bytes."""
    ballast = disk / "ballast"
    with open(ballast, "wb", buffering=0) as fh:  # unbuffered: nothing left to flush (and fail) at close
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    size = ballast.stat().st_size
    os.truncate(ballast, max(0, size - leave))
    return ballast


def test_full_disk_is_one_line_and_loses_nothing(cli, location, rng, tmp_path, tally):
    if _store_name(location) == "postgres":
        pytest.skip("PostgreSQL's disk is the server's: filling it would stop the server every test shares")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        index = str(disk / "index")
        corpus = Corpus(tmp_path / "docs", rng, files=10)
        assert cli.run("ingest", str(corpus.root), "--index", index, "--no-calibrate").code == 0
        committed = snapshot(index)
        ballast = _fill(disk, leave=128 * 1024)
        for _ in range(150):  # far more than the room left
            corpus._write(corpus._new_name())
        ended = cli.run("ingest", str(corpus.root), "--index", index, "--no-calibrate")
        wrong = _one_line_error(ended)
        tally.add("crash", "full disk during ingest (lancedb)", tried=1, failed=int(wrong is not None))
        assert wrong is None, wrong
        assert "No space left" in ended.stderr
        assert snapshot(index) == committed
        ballast.unlink()  # room again: the next ingest completes
        done = cli.run("ingest", str(corpus.root), "--index", index, "--no-calibrate")
        assert done.code == 0, done.stderr
        assert snapshot(index)[1] == len(list(corpus.root.iterdir()))
    finally:
        subprocess.run(["umount", str(disk)], check=True)
