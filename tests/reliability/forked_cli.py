"""A fork server for the real `funnel` CLI, so a test can start (and kill) hundreds of ingests.

`python forked_cli.py` imports funnel once, then forks a child per request; the child runs
`funnel.apps.cli.run()` exactly as the console script does: its own signal handlers, its own
`sys.exit`, its own interpreter shutdown (where native threads once aborted the process). What the
fork saves is the imports: several seconds per command on two busy cores. Tests signal the children
by pid; the server reaps them and reports how they ended.

Protocol, one JSON line each way: {"argv": [...], "cwd": ..., "out": path, "err": path} -> {"pid": n};
{"wait": pid, "timeout": s} -> {"code": exit code, negative for a signal, or null after a timeout (the
child is then killed)}.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Child:
    pid: int
    out: Path
    err: Path
    started: float


@dataclass(frozen=True)
class Ended:
    code: int | None  # None: it did not end within the timeout and was killed
    stdout: str
    stderr: str
    seconds: float


class ForkedCli:
    """The client: start the server with `env` (FUNNEL_EMBEDDER, ...), then `start`/`wait` or `run`."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir = workdir
        self._count = 0
        self._server = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, **env}, cwd=workdir,
        )
        assert self._ask({"ping": True}) == {"pong": True}, "the fork server did not start"

    def _ask(self, request: dict) -> dict:
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        line = self._server.stdout.readline()
        assert line, f"the fork server ended (exit {self._server.poll()})"
        return json.loads(line)

    def start(self, *args: str) -> Child:
        self._count += 1
        out, err = self.workdir / f"cli-{self._count}.out", self.workdir / f"cli-{self._count}.err"
        reply = self._ask({"argv": ["funnel", *args], "cwd": str(self.workdir), "out": str(out), "err": str(err)})
        # The child is "started" once its output goes to its files (the moment right before `run()`): a
        # signal before that would hit the fork server's code, not the CLI.
        deadline = time.monotonic() + 30
        while not err.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        return Child(reply["pid"], out, err, time.monotonic())

    def wait(self, child: Child, timeout: float = 120) -> Ended:
        code = self._ask({"wait": child.pid, "timeout": timeout})["code"]
        ended = Ended(code, child.out.read_text(errors="replace"), child.err.read_text(errors="replace"),
                      time.monotonic() - child.started)
        child.out.unlink()
        child.err.unlink()
        return ended

    def run(self, *args: str, timeout: float = 120) -> Ended:
        return self.wait(self.start(*args), timeout)

    def close(self) -> None:
        self._server.stdin.close()
        self._server.wait(30)


def _serve() -> dict | None:
    """The server loop; returns the request in a forked child, None in the server when stdin closes."""
    # What a child would otherwise import itself: LanceDB alone takes seconds, the builtin reranker's
    # module (built, never run, by `funnel ingest`) seconds more.
    import lancedb  # noqa: F401
    import pyarrow  # noqa: F401

    import funnel.apps.cli  # noqa: F401
    import funnel.apps.factory  # noqa: F401
    import funnel.index.lance  # noqa: F401
    import funnel.index.postgres  # noqa: F401
    import funnel.rerank.onnx_cross_encoder  # noqa: F401

    # LanceDB starts its event-loop thread at import and resets it in a forked child; it warns that a
    # fork in the middle of an operation could deadlock. This process never runs one.
    warnings.filterwarnings("ignore", message="lancedb fork support is experimental")
    # Keep the collector off the imported objects: a child's exit then copies far fewer shared pages.
    gc.freeze()

    for line in sys.stdin:
        request = json.loads(line)
        if "ping" in request:
            reply = {"pong": True}
        elif "wait" in request:
            reply = {"code": _reap(request["wait"], request["timeout"])}
        else:
            pid = os.fork()
            if pid == 0:
                return request
            reply = {"pid": pid}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return None


def _reap(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def _become_the_cli(request: dict) -> None:
    os.chdir(request["cwd"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(request["err"] + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for fd, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = request["argv"]
    if os.environ.get("FORKED_CLI_BATCH"):  # smaller write batches: more table versions, more points to stop at
        import funnel.indexer

        funnel.indexer.BATCH = int(os.environ["FORKED_CLI_BATCH"])
    from funnel.apps.cli import run

    os.rename(request["err"] + ".tmp", request["err"])  # tells the client the CLI starts now
    run()


if __name__ == "__main__":
    wanted = _serve()
    if wanted is not None:
        _become_the_cli(wanted)
