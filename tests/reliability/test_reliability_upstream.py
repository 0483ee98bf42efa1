"""Upstream faults (issue 17): the reranker, the LLM, Slack and PostgreSQL each refuse the connection, hang,
answer a byte at a time, answer garbage, or close mid-answer. Through the highest real layer (the HTTP API,
the triage service, `funnel.open` and the CLI), every time:

- the answer is still served where the design says (first-stage order; the extractive answer, or the
  streamed answer marked interrupted; the triage result; a one-line StoreError with the index intact),
- the status says why in one line (no traceback, no HTML), naming the fault,
- and it comes back within the configured timeout plus a margin: a hang never hangs the caller.

Each (upstream, fault) is tried `scale(1, 20)` times (more under `make soak`) and counted in the tally.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest
from api_support import CEO_QUESTION, ingested_samples, sse_events, wait_triaged
from faults import (GARBAGE, MODES, CohereReranker, FaultServer, OllamaLlm, OpenAILlm, SlackWebhook,
                    closed_port)
from helpers import serving
from tally import scale

from funnel.apps.api import create_app
from funnel.apps.settings import Settings

TIMEOUT = 0.5  # every upstream's timeout in these tests
MARGIN = 2.5  # the rest of the request, on two shared cores
REPEAT = scale(1, 20)
QUERY = "Who is the CEO of Zentara Robotics?"

# What the status must say, per fault (and garbage variant): the fault, not just "failed".
NAMES = {
    "refuse": r"ConnectError|[Rr]efused",
    "hang": r"timed out|did not answer within",
    "trickle": r"timed out|did not answer within",
    "html": r"malformed JSON|not an? (event stream|JSON)|sent no",
    "proxy": r"HTTP 502: Bad Gateway",
    "shape": r"no 'results'|no choices|no message|sent no|not an object|of type"
             r"|ended before a line with done",
    "bytes": r"illegal status line",
    "close": r"peer closed|incomplete|broke",
}
_HTML = re.compile(r"<\s*/?\s*(html|head|body|h1|p|style|!doctype)\b", re.IGNORECASE)


def cases(fault: str) -> list[str]:
    """The variants of one fault: garbage comes in four kinds, the others in one."""
    return list(GARBAGE) if fault == "garbage" else [fault]


def problem(reason: str | None, variant: str) -> str | None:
    """What is wrong with a status line, or None when it is one line that names the fault."""
    if not reason:
        return "no reason given"
    if "\n" in reason or "Traceback" in reason or len(reason) > 600:
        return f"not one short line: {reason!r:.300}"
    if _HTML.search(reason):
        return f"HTML in the reason: {reason!r:.300}"
    if not re.search(NAMES[variant], reason):
        return f"does not name the fault ({NAMES[variant]}): {reason!r:.300}"
    return None


class Matrix:
    """Counts one (upstream, fault) row: what was tried, what broke a promise (with why), the slowest."""

    def __init__(self, tally, target: str):
        self.tally, self.target = tally, target
        self.tried, self.broken, self.worst = 0, [], 0.0

    def check(self, variant: str, seconds: float, limit: float, problems: list[str | None]) -> None:
        self.tried += 1
        self.worst = max(self.worst, seconds)
        if seconds > limit:
            problems = [*problems, f"took {seconds:.2f}s, over {limit:.2f}s"]
        found = [p for p in problems if p]
        if found:
            self.broken.append(f"{variant}: " + "; ".join(found))

    def done(self) -> None:
        self.tally.add("upstream", self.target, tried=self.tried, failed=len(self.broken),
                       seconds=round(self.worst, 2))
        assert not self.broken, "\n".join(self.broken[:10])


def set_fault(server: FaultServer, variant: str) -> None:
    if variant in GARBAGE:
        server.garbage_variant = variant
        server.mode = "garbage"
    else:
        server.mode = variant


# --- the API app: reranker (search) and LLM (ask, JSON and SSE) -------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return ingested_samples(tmp_path_factory.mktemp("upstream") / "data", reranker="lexical")


@pytest.fixture(scope="module")
def upstreams():
    servers = {"reranker": FaultServer(CohereReranker()), "openai": FaultServer(OpenAILlm()),
               "ollama": FaultServer(OllamaLlm())}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def api(data_dir, upstreams):
    settings = Settings(
        embedder="hashing", data_dir=data_dir,
        reranker=f"cohere:{upstreams['reranker'].url}", rerank_timeout_s=TIMEOUT,
        llm=f"openai:{upstreams['openai'].url}/v1", llm_timeout_s=TIMEOUT,
    )
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def ollama_api(data_dir, upstreams):
    settings = Settings(embedder="hashing", data_dir=data_dir, reranker="none",
                        llm=f"ollama:{upstreams['ollama'].url}", llm_timeout_s=TIMEOUT)
    with serving(create_app(settings)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.fixture(params=["openai", "ollama"])
def llm(request, upstreams):
    """(the API over that LLM, its fault server)."""
    client = request.getfixturevalue("api" if request.param == "openai" else "ollama_api")
    server = upstreams[request.param]
    server.mode = "ok"
    yield request.param, client, server
    server.mode = "ok"


def search(client, query=QUERY, policy="replace") -> dict:
    response = client.post("/v1/collections/default/search", json={"query": query, "policy": policy})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("fault", MODES)
def test_reranker_fault_keeps_the_first_stage_order(api, upstreams, fault, tally):
    server = upstreams["reranker"]
    server.mode = "ok"
    assert search(api)["rerank_status"] == "ok"  # the reranker really runs under this policy
    row = Matrix(tally, f"reranker: {fault}")
    for attempt in range(REPEAT):
        for variant in cases(fault):
            query = f"{QUERY} {fault} {variant} {attempt}"  # a new query: no score comes from the cache
            first_stage = [r["document_id"] for r in search(api, query, policy="none")["results"]]
            set_fault(server, variant)
            t0 = time.monotonic()
            body = search(api, query)
            seconds = time.monotonic() - t0
            order = [r["document_id"] for r in body["results"]]
            row.check(variant, seconds, TIMEOUT + MARGIN, [
                None if body["rerank_status"] == "fallback" else f"rerank_status {body['rerank_status']}",
                None if order == first_stage else f"order {order} is not the first stage's {first_stage}",
                problem(body["rerank_reason"], variant),
            ])
    server.mode = "ok"
    row.done()


def ask(client, **kw) -> dict:
    response = client.post("/v1/collections/default/ask", json={"question": CEO_QUESTION, **kw})
    assert response.status_code == 200, response.text
    return response.json()


def ask_stream(client) -> list[tuple[str, dict]]:
    body = {"question": CEO_QUESTION, "stream": True}
    with client.stream("POST", "/v1/collections/default/ask", json=body) as response:
        assert response.status_code == 200
        return sse_events(response)


def each_variant(server, fault: str, call):
    """Every variant of `fault`, REPEAT times: (variant, what `call()` returned with it set, seconds taken)."""
    for _ in range(REPEAT):
        for variant in cases(fault):
            set_fault(server, variant)
            t0 = time.monotonic()
            value = call()
            yield variant, value, time.monotonic() - t0


@pytest.mark.parametrize("fault", MODES)
def test_llm_fault_answers_extractively(llm, fault, tally):
    kind, api, server = llm
    assert ask(api)["generator"].startswith(f"{kind}:")  # the LLM really answers when it is up
    row = Matrix(tally, f"LLM ({kind}, JSON): {fault}")
    for variant, body, seconds in each_variant(server, fault, lambda: ask(api)):
        row.check(variant, seconds, TIMEOUT + MARGIN, [
            None if body["generator"] == "extractive" else f"generator {body['generator']}",
            None if "Iris Kallas" in body["answer"] else f"no answer: {body['answer']!r:.100}",
            problem(body["fallback_reason"], variant),
        ])
    row.done()


@pytest.mark.parametrize("fault", MODES)
def test_llm_fault_in_a_stream_ends_with_an_answer(llm, fault, tally):
    """Before the first word: the extractive answer, streamed. After it (`close` sends two events first):
    the words so far, then the "[answer interrupted: why]" delta and `done` flagged interrupted."""
    kind, api, server = llm
    row = Matrix(tally, f"LLM ({kind}, SSE): {fault}")
    for variant, events, seconds in each_variant(server, fault, lambda: ask_stream(api)):
        names = [name for name, _ in events]
        if names[-1:] != ["done"]:
            row.check(variant, seconds, TIMEOUT + MARGIN, [f"the stream ended with {names[-3:]}"])
            continue
        done = events[-1][1]
        deltas = "".join(data["text"] for name, data in events if name == "delta")
        if variant == "close":
            marker = re.search(r"\[answer interrupted: (.*)\]$", done["answer"])
            kept = done["answer"].startswith("Iris Kallas is the CEO")  # the two events sent
            checks = [
                None if "interrupted" in done["flags"] else f"flags {done['flags']}",
                None if kept else "the words already shown are lost",
                problem(marker.group(1) if marker else None, variant),
            ]
        else:
            checks = [
                None if done["generator"] == "extractive" else f"generator {done['generator']}",
                None if "Iris Kallas" in done["answer"] else f"no answer: {done['answer']!r:.100}",
                problem(done["fallback_reason"], variant),
            ]
        checks.append(None if deltas == done["answer"] else "the deltas are not the answer")
        row.check(variant, seconds, TIMEOUT + MARGIN, checks)
    row.done()


# --- Slack: the triage result is returned, the incident says why the message did not go out -------------


@pytest.fixture(scope="module")
def triage_api(tmp_path_factory):
    from test_triage import SAMPLE_REPO

    from funnel.apps.state.incidents import EmbeddedIncidents
    from funnel.apps.triage.service import TriageService
    from funnel.apps.triage.slack import SlackNotifier
    from funnel.embed import HashingEmbedder
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    slack = FaultServer(SlackWebhook())
    tmp = tmp_path_factory.mktemp("triage-faults")
    pipeline = Pipeline.build(store=LanceStore(tmp / "index"), embedder=HashingEmbedder(), reranker=None)
    pipeline.ingest([SAMPLE_REPO])
    notifier = SlackNotifier(f"{slack.url}/services/T000/B000/XXXXsecretXXXX", timeout=TIMEOUT, max_retries=1,
                             backoff=0.05, rate_per_minute=100_000, dedupe_window_s=0)
    service = TriageService(pipeline, repo_root=SAMPLE_REPO, notifier=notifier,
                            incidents=EmbeddedIncidents(tmp / "incidents.sqlite"))
    with serving(create_app(Settings(), triage=service)) as url:
        with httpx.Client(base_url=url, timeout=60) as http:
            yield http, slack, notifier
    slack.stop()


def slack_step(client: httpx.Client, incident_id, timeout: float) -> dict:
    """The incident's Slack step once it ended (a worker posts after the request), or as it stands after
    `timeout` (then its status is not the one the check wants)."""
    try:
        return wait_triaged(client, incident_id, timeout)["steps"]["slack"]
    except AssertionError:
        return client.get(f"/v1/incidents/{incident_id}").json()["steps"]["slack"]


@pytest.mark.parametrize("fault", MODES)
def test_slack_fault_still_returns_the_triage_result(triage_api, fault, tally):
    """The request answers with the ranked files without waiting for Slack; the incident's Slack step then
    ends within Slack's timeouts. A 200 with a body that is not Slack's "ok" (garbage html/shape) counts as
    delivered: Slack's answer is its status code; every other fault is `failed`, and the step says why."""
    from test_triage import raised_in_sample_app

    client, server, notifier = triage_api
    trace = raised_in_sample_app("unknown_sku")
    report = {"service": "shop", "message": "checkout failed", "stack_trace": trace}
    server.mode = "ok"
    limit = (notifier.max_retries + 1) * TIMEOUT + notifier.backoff * 2 + MARGIN
    first = client.post("/v1/errors", json=report).json()
    assert slack_step(client, first["incident_id"], limit)["status"] == "sent"
    row = Matrix(tally, f"Slack: {fault}")
    for _ in range(REPEAT):
        for variant in cases(fault):
            set_fault(server, variant)
            t0 = time.monotonic()
            response = client.post("/v1/errors", json=report)
            body = response.json()
            files = [f["path"] for f in body.get("result", {}).get("files", [])]
            checks = [
                None if response.status_code == 200 else f"HTTP {response.status_code}: {response.text:.200}",
                None if files[:1] == ["app/inventory.py"] else f"files {files[:3]}",
            ]
            slack = slack_step(client, body.get("incident_id"), limit)
            seconds, detail = time.monotonic() - t0, slack["detail"]
            if variant in ("html", "shape"):
                checks.append(None if slack["status"] == "sent" else f"slack {slack['status']}: {detail}")
            else:
                checks.append(None if slack["status"] == "failed" else f"slack {slack['status']}")
                checks.append(problem(detail, variant))
                leaked = detail and "secret" in detail
                checks.append("the webhook's secret is in the detail" if leaked else None)
            row.check(variant, seconds, limit, checks)
    server.mode = "ok"
    row.done()


# --- PostgreSQL: a one-line StoreError, nothing lost ------------------------------------------------------


PG_NAMES = {
    "refuse": r"Connection refused",
    "hang": r"timeout expired",
    "trickle": r"timeout expired",
    "garbage": r"invalid response",
    "close": r"closed the connection",
}
PG_PASSWORD = "pg-fault-pw-0815"
PG_CONNECT_TIMEOUT = 2  # libpq's least: 1 counts as 2


def pg_problem(error: Exception | None, pattern: str) -> str | None:
    from funnel.errors import StoreError

    if not isinstance(error, StoreError):
        return f"not a StoreError: {type(error).__name__}: {error!r:.200}"
    text = str(error)
    if "\n" in text or PG_PASSWORD in text or not re.search(pattern, text):
        return f"not one line naming the fault ({pattern}), without the password: {text!r:.300}"
    return None


@pytest.mark.parametrize("fault", MODES)
def test_postgres_fault_is_one_line_through_funnel_open(fault, tally):
    pytest.importorskip("psycopg")
    import funnel
    from faults import NotPostgres

    server = FaultServer(NotPostgres())
    row = Matrix(tally, f"PostgreSQL: {fault}")
    try:
        server.mode = fault
        url = (f"postgresql://funnel:{PG_PASSWORD}@127.0.0.1:{server.port}/funnel"
               f"?connect_timeout={PG_CONNECT_TIMEOUT}")
        for _ in range(REPEAT):
            t0 = time.monotonic()
            error = None
            try:
                funnel.open(url, embedder="hashing").search(QUERY)
            except Exception as e:  # noqa: BLE001 (what escapes is what is checked)
                error = e
            limit = PG_CONNECT_TIMEOUT + MARGIN
            row.check(fault, time.monotonic() - t0, limit, [pg_problem(error, PG_NAMES[fault])])
    finally:
        server.stop()
    row.done()


def test_postgres_down_is_one_line_through_the_cli(tmp_path, tally):
    import subprocess
    import sys

    url = f"postgresql://funnel:{PG_PASSWORD}@127.0.0.1:{closed_port()}/funnel?connect_timeout=2"
    row = Matrix(tally, "PostgreSQL: refuse (CLI)")
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-c", "from funnel.apps.cli import run; run()", "search", QUERY,
                             "--index", url, "--embedder", "hashing"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    row.check("refuse", time.monotonic() - t0, 60, [
        None if result.returncode == 5 else f"exit {result.returncode}",
        None if len(lines) == 1 and "Connection refused" in lines[0] and PG_PASSWORD not in lines[0]
        else f"stderr {result.stderr!r:.400}",
    ])
    row.done()


class Terminator:
    """Ends every other backend of the test's database, every few milliseconds, while it runs: each of
    the store's connections is killed mid-query sooner or later."""

    def __init__(self, dsn: str):
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.killed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.003):
            rows = self.conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
            self.killed += sum(1 for (ok,) in rows if ok)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        self.conn.close()


def test_postgres_connections_killed_mid_query_lose_nothing(pg_dsn, tmp_path, tally):
    """pg_terminate_backend on the real server while funnel searches and ingests: every call either
    answers as before or fails with one StoreError line; the committed index is the same afterwards, an
    interrupted ingest leaves nothing of itself, and the next calls work."""
    import funnel
    from api_support import SAMPLES

    pipeline = funnel.open(pg_dsn, embedder="hashing")
    first = sorted(SAMPLES.iterdir())[:2]
    pipeline.ingest(first)
    before = pipeline.store.info()
    expected = [d.doc_id for d in pipeline.search(QUERY, k=3, policy="none").documents]
    pattern = r"lost the connection|cannot connect|terminat|closed the connection|the write failed"
    searches = Matrix(tally, "PostgreSQL: close (backend killed mid-search)")
    with Terminator(pg_dsn) as killer:
        for _ in range(scale(30, 300)):
            t0 = time.monotonic()
            try:
                got = [d.doc_id for d in pipeline.search(QUERY, k=3, policy="none").documents]
                checks = [None if got == expected else f"results changed: {got}"]
            except Exception as e:  # noqa: BLE001
                checks = [pg_problem(e, pattern)]
            searches.check("close", time.monotonic() - t0, MARGIN, checks)
    assert killer.killed > 0
    searches.done()

    ingests = Matrix(tally, "PostgreSQL: close (backend killed mid-ingest)")
    rest = sorted(SAMPLES.iterdir())[2:]
    for _ in range(scale(2, 10)):
        writer = funnel.open(pg_dsn, embedder="hashing")
        with Terminator(pg_dsn):
            t0 = time.monotonic()
            try:
                writer.ingest(rest)
                checks = ["the ingest went through while its connection was being killed"]
            except Exception as e:  # noqa: BLE001
                checks = [pg_problem(e, pattern)]
        reader = funnel.open(pg_dsn, embedder="hashing")
        after = reader.store.info()
        checks.append(None if (after.version, after.chunks) == (before.version, before.chunks)
                      else f"index changed: {before} -> {after}")
        got = [d.doc_id for d in reader.search(QUERY, k=3, policy="none").documents]
        checks.append(None if got == expected else f"results changed: {got}")
        ingests.check("close", time.monotonic() - t0, 60, checks)
    ingests.done()

    again = funnel.open(pg_dsn, embedder="hashing")
    again.ingest(rest)  # the server is left alone: the same ingest now commits
    assert again.store.info().version > before.version
