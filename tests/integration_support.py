"""What the LangChain and LlamaIndex integration tests share: a real index of samples/docs, questions about
it, a reranker that outlives its timeout, and a guard that fails a test reaching for the network."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

import funnel
from funnel.types import RerankResult

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "docs"
# Questions whose answering document funnel ranks first under every policy (checked on this corpus).
COMMITTEE = ("How many members does the investment committee have?", "investment_policy.md")
MEETING = ("When is the next quarterly meeting?", "board_minutes_2024_q3.txt")
CEO = "Who is the CEO of Zentara Robotics?"  # answered only by a row of the PDF's table


def build_sample_index(path: Path) -> Path:
    """samples/docs ingested into `path` with the packaged all-MiniLM-L6-v2 (int8)."""
    report = funnel.open(path).ingest([SAMPLES])
    assert report.added == len(list(SAMPLES.iterdir())) and not report.problems
    return path


def check_bad_input(open_retriever, retrieve, index: str, missing: Path) -> None:
    """A retriever over no index, with the wrong embedder, or asked nothing: ValueError, funnel's message."""
    where = re.escape(str(missing))
    message = rf"^no index at {where}: run `funnel ingest PATH --index {where}` first$"
    with pytest.raises(ValueError, match=message):
        open_retriever(index=str(missing))
    with pytest.raises(ValueError, match=r"^the index was built with embedder all-MiniLM-L6-v2-int8"):
        retrieve(open_retriever(index=index, embedder="hashing"), CEO)
    with pytest.raises(ValueError, match=r"^the query is empty$"):
        retrieve(open_retriever(index=index), "  \n ")
    with pytest.raises(ValueError, match=r"^unknown reranker 'cohere'; valid: none, builtin"):
        open_retriever(index=index, reranker="cohere")
    with pytest.raises(ValueError, match=r"^invalid setting rerank.policy: Input should be 'none', 'replace'"):
        open_retriever(index=index, policy="best")
    with pytest.raises(ValueError, match=r"^invalid setting search.k: "):
        open_retriever(index=index, k=0)


class SlowReranker:
    """Answers, but only after `seconds`: longer than a test's rerank timeout."""

    name = "slow"

    def __init__(self, seconds: float):
        self.seconds = seconds

    def rerank(self, query, candidates):
        time.sleep(self.seconds)
        return RerankResult(tuple(1.0 for _ in candidates))


LOOPBACK = ("127.0.0.1", "::1", "localhost")


class NoNetwork:
    """Patches socket connections: anything but the loopback is refused and recorded."""

    def __init__(self, monkeypatch):
        self.attempts: list[object] = []
        real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

        def connect(sock, address):
            host = address[0] if isinstance(address, tuple) else address
            if sock.family in (socket.AF_INET, socket.AF_INET6) and host not in LOOPBACK:
                self.attempts.append(address)
                raise OSError(f"network access in a test: {address}")
            return real_connect(sock, address)

        def getaddrinfo(host, *args, **kwargs):
            if host is None or host in LOOPBACK:
                return real_getaddrinfo(host, *args, **kwargs)
            self.attempts.append(host)
            raise OSError(f"name lookup in a test: {host}")

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
