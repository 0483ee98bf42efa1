"""Folders that stay indexed: `funnel ingest --watch` and `funnel serve --watch`, as real processes over real
file system events (the hashing embedder: what is tested is the syncing, not the model)."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from funnel.apps.watch import ChangeFilter, folder_name
from funnel.index.lance import LanceStore

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]
ENV = {**os.environ, "FUNNEL_EMBEDDER": "hashing", "FUNNEL_RERANK__BACKEND": "none"}
SYNC_S = 20  # every change must show within this long

pytestmark = pytest.mark.slow


def wait_for(check, what: str, timeout: float = SYNC_S) -> float:
    """Seconds until `check()` holds; fails after `timeout`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"not within {timeout}s: {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def texts(index: Path) -> dict[str, str]:
    """Each indexed document's file name and text, from the last committed version."""
    store = LanceStore(index)
    if store.info() is None:
        return {}
    return {Path(d).name: " ".join(c.text for c in store.get_chunks(d)) for d in store.document_hashes()}


def has(index: Path, name: str, words: str = "") -> bool:
    return words in texts(index).get(name, "\0") if words else name in texts(index)


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2  # <linux/prctl.h>, <linux/capability.h>


def obey_file_permissions() -> None:
    """In the child, before exec: a root process without these two capabilities is refused a file its mode
    refuses (root reads any file otherwise), so the watcher meets 'Permission denied' as a user would."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


class Watching:
    """`funnel ingest --watch FOLDER`, started and waited for until it watches. `unprivileged`: run as root,
    it obeys file permissions anyway."""

    def __init__(self, folder: Path, index: Path, unprivileged: bool = False):
        drop = unprivileged and os.geteuid() == 0
        self.process = subprocess.Popen(
            [*FUNNEL, "ingest", "--watch", str(folder), "--index", str(index)], cwd=folder.parent, env=ENV,
            preexec_fn=obey_file_permissions if drop else None,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = ""
        while not line.startswith("watching"):
            line = self.process.stdout.readline()
            assert line, self.process.communicate(timeout=10)[1]

    def interrupt(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def save_like_an_editor(path: Path, text: str) -> None:
    """Write a temp file beside it, then rename it over the original (vim's and VS Code's atomic save)."""
    temp = path.with_name(f".{path.name}.swp")
    temp.write_text(text)
    os.replace(temp, path)


def test_ingest_watch_follows_edits_renames_and_deletes(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "alpha.md").write_text("# Alpha\nThe anvil weighs forty kilograms.\n")
    (docs / ".gitignore").write_text("scratch/\n")
    index = docs / ".funnel"  # inside the watched folder: its own writes must not start syncs
    watcher = Watching(docs, index)
    latencies = {}
    try:
        assert has(index, "alpha.md", "forty")
        started = time.monotonic()
        (docs / "bravo.txt").write_text("Bravo mentions the turbine.\n")
        latencies["create"] = wait_for(lambda: has(index, "bravo.txt", "turbine"), "a new file")
        save_like_an_editor(docs / "alpha.md", "# Alpha\nThe anvil weighs fifty kilograms.\n")
        latencies["editor save"] = wait_for(lambda: has(index, "alpha.md", "fifty"), "an editor's save")
        (docs / "bravo.txt").rename(docs / "charlie.txt")
        latencies["rename"] = wait_for(
            lambda: has(index, "charlie.txt") and not has(index, "bravo.txt"), "a rename")
        (docs / "charlie.txt").unlink()
        latencies["delete"] = wait_for(lambda: not has(index, "charlie.txt"), "a delete")
        (docs / "scratch").mkdir()
        (docs / "scratch" / "notes.md").write_text("ignored by .gitignore\n")
        (docs / "delta.md").write_text("Delta comes after the ignored file.\n")
        wait_for(lambda: has(index, "delta.md"), "a file after an ignored one")
        assert set(texts(index)) == {"alpha.md", "delta.md"}
        print(f"sync latency: {latencies}; all in {time.monotonic() - started:.1f}s")
        code, out, err = watcher.interrupt()
    finally:
        watcher.kill()
    assert code == 130 and "Traceback" not in err, err
    said = "interrupted: stopped watching; the index keeps the last ingest that completed"
    assert err.strip().splitlines() == [said]
    assert out.count("synced:") <= 6, out  # each change once or so: the index's own writes started none
    assert set(texts(index)) == {"alpha.md", "delta.md"}  # intact after the Ctrl-C


def test_a_burst_and_a_folder_that_disappears_and_comes_back(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.md").write_text("kept\n")
    index = tmp_path / "index"
    watcher = Watching(docs, index)
    try:
        # 1,000 files, each written 10 times as fast as Python can: over 10,000 events, one consistent index.
        for version in range(10):
            for n in range(1000):
                (docs / f"f{n:04}.txt").write_text(f"file {n} version {version}\n")
        wait_for(lambda: sum("version 9" in t for t in texts(index).values()) == 1000, "the burst", 60)
        assert len(texts(index)) == 1001
        docs.rename(tmp_path / "away")  # gone at once, like an unmounted disk
        time.sleep(2.5)  # a check or two passes: the documents are kept while the folder is gone
        assert len(texts(index)) == 1001
        shutil.rmtree(tmp_path / "away")
        docs.mkdir()
        (docs / "back.md").write_text("The folder is back.\n")
        wait_for(lambda: set(texts(index)) == {"back.md"}, "the folder made again")
        (docs / "later.md").write_text("Watched again.\n")
        wait_for(lambda: has(index, "later.md"), "a change in the folder made again")
        code, _, err = watcher.interrupt()
    finally:
        watcher.kill()
    assert code == 130 and "Traceback" not in err, err


def test_an_unreadable_file_is_skipped_and_keeps_its_last_version(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "open.md").write_text("open\n")
    secret = docs / "secret.md"
    secret.write_text("the first version\n")
    index = tmp_path / "index"
    watcher = Watching(docs, index, unprivileged=True)
    try:
        secret.write_text("the second version\n")
        secret.chmod(0)
        (docs / "next.md").write_text("after the unreadable file\n")
        wait_for(lambda: has(index, "next.md"), "a change beside an unreadable file")
        assert has(index, "secret.md", "first version")
        code, _, err = watcher.interrupt()
    finally:
        secret.chmod(0o644)
        watcher.kill()
    assert code == 130 and "Permission denied" in err and "Traceback" not in err, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_watch_keeps_a_collection_in_sync(tmp_path):
    notes = tmp_path / "Team Notes"
    notes.mkdir()
    (notes / "zebra.md").write_text("The zebra eats grass on Tuesdays.\n")
    port = free_port()
    process = subprocess.Popen(
        [*FUNNEL, "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--watch", str(notes)],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    base = f"http://127.0.0.1:{port}/v1/collections/team-notes"

    def found(query: str) -> list[str]:
        try:
            response = httpx.post(f"{base}/search", json={"query": query}, timeout=10)
        except httpx.TransportError:  # not listening yet
            assert process.poll() is None, process.communicate()[1]
            return []
        return [r["path"] for r in response.json().get("results", [])] if response.status_code == 200 else []

    try:
        wait_for(lambda: any(p.endswith("zebra.md") for p in found("zebra")), "serve's first sync", 60)
        (notes / "quokka.txt").write_text("Quokkas smile at photographers.\n")
        latency = wait_for(lambda: any(p.endswith("quokka.txt") for p in found("quokkas smile")), "a new file")
        print(f"serve --watch sync latency: {latency:.2f}s")
        (notes / "zebra.md").unlink()
        wait_for(lambda: not any(p.endswith("zebra.md") for p in found("zebra")), "a delete")
        listed = {c["name"]: c for c in httpx.get(f"http://127.0.0.1:{port}/v1/collections").json()}
        watch = listed["team-notes"]["watch"]
        assert watch["watching"] and watch["last_sync"] and watch["last_error"] is None
        assert listed["team-notes"]["documents"] == 1
        upload = httpx.post(f"{base}/documents", files={"file": ("x.md", b"# x\nhello\n")}, timeout=10)
        assert upload.status_code == 409 and "mirrors the folder" in upload.json()["detail"]
        assert httpx.delete(base, timeout=10).status_code == 409
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
        assert health["watched"]["team-notes"]["syncs"] >= 2
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err, err


def test_the_change_filter_follows_the_walk(tmp_path):
    (tmp_path / ".gitignore").write_text("*.log\nout/\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "lock.yaml.lock").write_text("")
    relevant = ChangeFilter([tmp_path], ignore=[tmp_path / ".funnel"]).relevant
    for path in ("a.md", "src/b.py", ".gitignore", "gone-folder"):
        assert relevant([str(tmp_path / path)]), path
    ignored = (".funnel/data/x.lance", ".a.md.swp", "a.md~", "4913", "x.log", "out/a.md", "node_modules/a.js",
               "lock.yaml.lock", "image.gif")
    for path in ignored:
        assert not relevant([str(tmp_path / path)]), path
    assert not ChangeFilter([tmp_path / "a.md"]).relevant([str(tmp_path / "b.md")])  # a named file's sibling
    assert folder_name(Path("/x/Team Notes")) == "team-notes" and folder_name(Path("/x/__")) == "watched"
