"""Fuzzing (issue 17): no input may end in an unhandled exception or a hang.

Every target is fed random and near-valid input by hypothesis; the promise is the same everywhere: a result,
or funnel's own error with a one-line message (a 4xx with a one-line JSON body over HTTP), or the documented
fallback with a status. Each example runs under a time limit, so a hang is a failure, not a stuck suite.

`make test` runs a short, derandomized pass (reproducible in CI); `make soak` (FUNNEL_SOAK=1) runs 10-20x
more examples with fresh randomness. Every bug found keeps a plain `@example` that failed before its fix.
Every loader is fuzzed in test_reliability_loaders.py, its cases generated from the loaders' table.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from api_support import wait_done
from damage import damaged
from tally import SOAK, scale

from funnel.apps.settings import Settings, load_settings
from funnel.apps.triage.frames import fingerprint, mask_variables, match_frames, trace_symbols
from funnel.apps.triage.stacktrace import ParsedError, parse_trace
from funnel.errors import FunnelError, UpstreamError
from funnel.eval.beir import load_beir, load_corpus, parents
from funnel.eval.questions import load_questions
from funnel.types import Candidate, Chunk

EXAMPLE_LIMIT_S = 20.0  # one input taking longer than this is a hang (generous: 2 shared cores)


# --- the harness --------------------------------------------------------------------------------------------


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Raise `Hang` in the main thread when the block runs longer than `seconds` (SIGALRM)."""

    def expired(signum, frame):
        raise Hang(f"one input ran longer than {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def one_line(message: str) -> None:
    assert message and message.strip(), "an empty error message"
    assert "\n" not in message and "\r" not in message, f"not one line: {message!r:.300}"
    assert "Traceback" not in message, f"a traceback in a message: {message!r:.300}"


def expect_funnel_error(error: BaseException) -> None:
    """The rule for a failure: funnel's own error, one line."""
    if not isinstance(error, FunnelError):
        raise error
    one_line(str(error))


def fuzz(tally, target: str, strategy, check, short: int, soak: int, examples=()) -> None:
    """Run `check` on `short` (`soak` under FUNNEL_SOAK=1) values of `strategy`, plus `examples`; count
    every input run and every one that broke the rule in the tally. What `check` returns (an outcome such as
    "202 ready") is counted too, into the row's detail, to show the inputs reached past the front door."""
    counts = {"tried": 0, "failed": 0}
    outcomes: Counter[str] = Counter()

    def body(value):
        counts["tried"] += 1
        started = time.monotonic()
        try:
            with time_limit(EXAMPLE_LIMIT_S):
                outcome = check(value)
        except BaseException:
            counts["failed"] += 1
            raise
        if outcome is not None:
            outcomes[str(outcome)] += 1
        assert time.monotonic() - started < EXAMPLE_LIMIT_S, "one input took too long"

    test = given(strategy)(body)
    for value in examples:
        test = example(value)(test)
    test = settings(
        max_examples=scale(short, soak),
        deadline=None,
        derandomize=not SOAK,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )(test)
    try:
        test()
    finally:
        detail = {"outcomes": dict(outcomes.most_common())} if outcomes else {}
        tally.add("fuzz", target, tried=counts["tried"], failed=counts["failed"], **detail)
        seen = dict(outcomes.most_common(12))
        print(f"\n{target}: {counts['tried']} tried, {counts['failed']} failed {seen}")


# --- shared strategies --------------------------------------------------------------------------------------

NASTY = st.sampled_from(
    ["", " ", "\x00", "\ufeff", "\u2028", "\ud800", "é", "🦆", "\x1b[31m", "\r\n", "\t", "'", '"', "\\",
     "٣", "x" * 5000, "9" * 5000, "NaN", "-1", "null"]
)
TEXT = st.one_of(st.text(max_size=200), NASTY)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False), TEXT,
)
JSON = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=5)), max_leaves=20)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def huge_int_json(digits: int = 5000) -> str:
    return "[" + "7" * digits + "]"


def mangle(text: str, how: int) -> bytes:
    """Valid text made invalid in one of several ways: truncated, bad UTF-8, a NUL, CR line ends."""
    raw = text.encode("utf-8", "surrogatepass")
    if how == 0:
        return raw
    if how == 1:
        return raw[: len(raw) // 2]
    if how == 2:
        return raw + b"\xff\xfe\x80"
    if how == 3:
        return b"\x00".join(raw.split(b"\n"))
    return raw.replace(b"\n", b"\r")


# --- stack traces -------------------------------------------------------------------------------------------


WORD = st.text(alphabet="abcXYZ_$.<>/\\:0123456789 ()[]`+-@\"'#", max_size=30)
NUM = st.one_of(st.integers(min_value=0, max_value=10**6).map(str), st.just("9" * 5000), st.just("٣٤"))
HEADERS = st.sampled_from([
    "Traceback (most recent call last):", "Exception Group Traceback (most recent call last):",
    "  + Exception Group Traceback (most recent call last):", "  | ValueError: x", "  +-+---- 1 ----",
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
    'Exception in thread "main" java.lang.IllegalStateException: boom', "Caused by: java.io.IOException: x",
    "Suppressed: java.lang.RuntimeException", "\t... 12 more", "\t... 3 common frames omitted",
    "TypeError: Cannot read properties of undefined (reading 'x')", "    [cause]: Error: inner",
    "Uncaught ReferenceError: x is not defined", "panic: runtime error: index out of range [recovered]",
    "fatal error: all goroutines are asleep - deadlock!", "goroutine 1 [running]:", "[signal SIGSEGV]",
    "Unhandled exception. System.InvalidOperationException: nope", " ---> System.Exception: inner",
    "   --- End of inner exception stack trace ---", "--- End of stack trace from previous location ---",
    "ValueError", "KeyError: 'x'",
])
FRAMES = st.one_of(
    st.builds(lambda f, n, fn: f'  File "{f}", line {n}, in {fn}', WORD, NUM, WORD),
    st.builds(lambda q, loc: f"\tat {q}({loc})", WORD,
              st.one_of(WORD, st.builds("{}.java:{}".format, WORD, NUM))),
    st.builds(lambda fn, f, n, c: f"    at {fn} ({f}:{n}:{c})", WORD, WORD, NUM, NUM),
    st.builds(lambda f, n, c: f"    at {f}:{n}:{c}", WORD, NUM, NUM),
    st.builds(lambda call, f, n: f"{call}(0x0, {{0x1}})\n\t{f}:{n} +0x1d", WORD, WORD, NUM),
    st.builds(lambda name, f, n: f"   at {name}() in {f}:line {n}", WORD, WORD, NUM),
    st.builds(lambda name: f"   at {name}(String x)", WORD),
)
TRACE_LINES = st.one_of(HEADERS, FRAMES, TEXT, st.text(max_size=80), st.just("y" * 6000))
TRACES = st.one_of(
    st.text(max_size=2000),
    st.lists(TRACE_LINES, max_size=60).map("\n".join),
    st.lists(st.one_of(HEADERS, FRAMES), min_size=1, max_size=40).map("\r\n".join),
    st.builds(lambda lines, n: "\n".join(lines * n), st.lists(st.one_of(HEADERS, FRAMES), max_size=5),
              st.integers(1, 400)),  # long repetitive traces
)
REPO = ["app/user_service.py", "src/com/x/UserService.java", "lib/router.js", "cmd/main.go",
        "src/App/Program.cs", "requests/models.py", "index.js", "a/../b.py", "C:\\src\\x.cs"]


def check_trace(value: tuple[str, str]) -> None:
    text, message = value
    parsed = parse_trace(text, message)
    assert isinstance(parsed, ParsedError)
    match_frames(parsed.frames, REPO)
    trace_symbols(parsed)
    assert len(fingerprint(parsed)) == 16
    mask_variables(parsed.message)


def test_stack_trace_parsers(tally):
    deep_python = "Traceback (most recent call last):\n" + "\n".join(['  File "x", line 1, in f'] * 3000)
    fuzz(tally, "stack-trace parsers (python, java, javascript, go, dotnet) + frames",
         st.tuples(TRACES, TEXT), check_trace, short=400, soak=6000,
         examples=[(deep_python, ""), ("\tat a.B.c(B.java:1)\n" * 3000, "x" * 300_000)])


# --- BEIR and question sets ---------------------------------------------------------------------------------



def _jsonl_line(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


RECORD = st.one_of(
    st.fixed_dictionaries({"_id": st.one_of(st.sampled_from(["d1", "d2", "q1"]), JSON)},
                          optional={"title": JSON, "text": JSON, "metadata": JSON}),
    st.fixed_dictionaries({"_id": st.sampled_from(["d1", "d2", "q1", "q2"]), "text": TEXT, "title": TEXT},
                          optional={"metadata": st.fixed_dictionaries({}, optional={"doc_id": JSON,
                                                                                    "kind": JSON})}),
    JSON,
    st.sampled_from(['{"_id": "d1", "text": "a', "{", "[1, 2", deep(5000), '{"_id": ' + "1" * 5000 + "}"]),
)
JSONL = st.tuples(st.lists(RECORD.map(_jsonl_line), max_size=6), st.integers(0, 4)).map(
    lambda t: mangle("\n".join(t[0]), t[1]))
QREL_ROW = st.lists(st.one_of(st.sampled_from(["d1", "d2", "q1", "q2", "1", "-3", "x"]), TEXT),
                   max_size=5).map("\t".join)
QRELS = st.tuples(
    st.sampled_from(["query-id\tcorpus-id\tscore", "query-id\tcorpus-id", "", "a\tb\tc",
                     "query-id\tcorpus-id\tscore\textra", '"query-id\tcorpus-id\tscore']),
    st.lists(st.one_of(QREL_ROW, st.just("q1\td1\t1"), st.just("q1\td1\t" + "9" * 5000),
                       st.just('q1\t"' + "x" * 200_000)), max_size=6),
    st.integers(0, 4),
).map(lambda t: mangle("\n".join([t[0], *t[1]]), t[2]))
BEIR = st.fixed_dictionaries({
    "corpus": JSONL, "queries": JSONL, "qrels": QRELS,
    "layout": st.sampled_from(["flat", "split"]),
    "level": st.sampled_from(["auto", "record", "chunk", "document"]),
})


def check_beir(case: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        folder = root / "test" if case["layout"] == "split" else root
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_bytes(case["corpus"])
        (folder / "queries.jsonl").write_bytes(case["queries"])
        name = {"chunk": "chunk.tsv", "document": "document.tsv"}.get(case["level"], "test.tsv")
        (folder / "qrels" / name).write_bytes(case["qrels"])
        for load in (lambda: load_beir(root, "test", case["level"]), lambda: list(load_corpus(folder)),
                     lambda: parents(folder)):
            try:
                load()
            except BaseException as e:  # noqa: BLE001 (the rule decides)
                expect_funnel_error(e)


def test_beir_loader(tally):
    header, judged = b"query-id\tcorpus-id\tscore\n", b"query-id\tcorpus-id\tscore\nq1\td1\t1\n"

    def case(corpus: bytes, qrels: bytes = header, level: str = "auto") -> dict:
        queries = b'{"_id": "q1", "text": "what"}\n'
        return {"corpus": corpus, "queries": queries, "qrels": qrels, "layout": "flat", "level": level}

    fuzz(tally, "BEIR loader (corpus, queries, qrels)", BEIR, check_beir, short=150, soak=2500, examples=[
        # before the fix: UnicodeDecodeError, ValueError (over 4300 digits), AttributeError (twice),
        # csv.Error, RecursionError, UnicodeEncodeError
        case(b'{"_id": "d1", "text": "\xff"}\n'),
        case(b'{"_id": ' + b"1" * 5000 + b"}\n"),
        case(b'{"_id": "d1", "text": 5}\n', judged),
        case(b'{"_id": "d1", "metadata": [1]}\n', judged, "document"),
        case(b'{"_id": "d1", "text": "a"}\n', header + b'q1\t"' + b"x" * 200_000 + b"\n"),
        case(deep(100_000).encode()),
        case(b'{"_id": "d1", "title": "\\ud800"}\n'),  # UnicodeEncodeError (hashing the title) before the fix
    ])


QUESTION = st.one_of(
    st.fixed_dictionaries({"question": st.one_of(TEXT, JSON)}, optional={
        "id": JSON, "sources": st.one_of(JSON, st.lists(TEXT, max_size=3)),
        "answer_contains": st.one_of(JSON, st.lists(TEXT, max_size=3)), "page": JSON, "pages": JSON}),
    JSON,
)
VALID_QUESTION = st.fixed_dictionaries(
    {"question": st.text(min_size=1, max_size=40).filter(str.strip),
     "sources": st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=1)},
    optional={"id": st.one_of(st.text(max_size=10), st.integers()),
              "answer_contains": st.lists(TEXT, max_size=2),
              "page": st.one_of(st.integers(-1, 5), st.lists(st.integers(0, 5), max_size=3))})
QUESTION_SET = st.one_of(
    st.fixed_dictionaries({}, optional={
        "questions": st.one_of(st.lists(QUESTION, max_size=5), JSON), "documents": st.one_of(JSON, TEXT)}),
    st.fixed_dictionaries({"questions": st.lists(VALID_QUESTION, min_size=1, max_size=4),
                           "documents": st.one_of(st.just("docs"), st.lists(TEXT, max_size=2))}),
)


def _yaml(value) -> str:
    import yaml

    return yaml.safe_dump(value, allow_unicode=True)


YAML_TEXT = st.one_of(
    QUESTION_SET.map(_yaml), JSON.map(_yaml), st.text(max_size=300),
    st.sampled_from(["questions: [", "- question: a\n  sources: [x\n", "!!python/object:os.system {}",
                     "{a: b", "? [a]\n: b", "questions:\n  - &a [*a]", "a: &x [*x, *x]", "[" * 5000,
                     "\t- x"]),
)
QUESTIONS = st.one_of(
    st.tuples(st.just(".yaml"), st.tuples(YAML_TEXT, st.integers(0, 4)).map(lambda t: mangle(*t))),
    st.tuples(st.just(".jsonl"), st.tuples(
        st.lists(st.one_of(QUESTION.map(json.dumps), st.text(max_size=50), st.just(huge_int_json())),
                 max_size=5).map("\n".join),
        st.integers(0, 4)).map(lambda t: mangle(*t))),
)


def check_questions(case: tuple[str, bytes]) -> None:
    suffix, raw = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"questions{suffix}"
        path.write_bytes(raw)
        try:
            load_questions(path)
        except BaseException as e:  # noqa: BLE001
            expect_funnel_error(e)
            return type(e).__name__
        return "ok"


def test_question_set_loader(tally):
    one = b"questions:\n- question: q\n  sources: [a]\n"
    fuzz(tally, "question-set loader (YAML, JSONL)", QUESTIONS, check_questions, short=200, soak=3000,
         examples=[
        (".jsonl", huge_int_json().encode()),  # ValueError before the fix
        (".jsonl", deep(100_000).encode()),  # RecursionError before the fix
        (".yaml", ("[" * 5000).encode()),  # RecursionError before the fix
        (".yaml", one + b'documents: "a\\0b"\n'),  # ValueError (embedded NUL in a path) before the fix
        (".yaml", one + b"  id: 2024-13-45\n"),  # ValueError (an impossible date) before the fix
    ])


# --- settings and funnel.toml -------------------------------------------------------------------------------



def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string (for the BMP)


BMP = st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"])
TOML_SCALAR = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(alphabet=BMP, max_size=40))
TOML_VALUE = st.recursive(TOML_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)), max_leaves=6)
FIELDS = sorted(Settings.model_fields)
TOML_DOC = st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=10)), TOML_VALUE,
                           max_size=5).map(lambda d: "\n".join(f"{json.dumps(k)} = {_toml_value(v)}"
                                                              for k, v in d.items()))
TOML_BROKEN = st.sampled_from(["k = ", "[x", "k = 1\nk = 2", "index = '''", '"a\\nb" = 1'])
TOML_FILES = st.tuples(st.one_of(TOML_DOC, st.text(max_size=200), TOML_BROKEN),
                       st.integers(0, 4)).map(lambda t: mangle(*t))
OVERRIDES = st.dictionaries(st.sampled_from(FIELDS), st.one_of(JSON, TEXT), max_size=3)


@contextmanager
def funnel_config(raw: bytes):
    """FUNNEL_CONFIG naming a file holding `raw`, every other FUNNEL_* variable unset."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("FUNNEL_")}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "funnel.toml"
        path.write_bytes(raw)
        for k in saved:
            del os.environ[k]
        os.environ["FUNNEL_CONFIG"] = str(path)
        try:
            yield
        finally:
            del os.environ["FUNNEL_CONFIG"]
            os.environ.update(saved)


def check_settings(case: tuple[bytes, dict]) -> None:
    raw, overrides = case
    with funnel_config(raw):
        try:
            load_settings(**overrides)
        except BaseException as e:  # noqa: BLE001
            expect_funnel_error(e)
            return type(e).__name__
        return "ok"


def test_settings_and_funnel_toml(tally):
    fuzz(tally, "settings and funnel.toml", st.tuples(TOML_FILES, OVERRIDES), check_settings,
         short=200, soak=3000, examples=[
             (b'"a\\nb" = 1', {}),  # a key with a newline made a two-line message before the fix
             (b"k = " + b"[" * 3000, {}),  # RecursionError before the fix
             (b"\xff", {}), (b"", {"k": "\n"})])


CLI_GARBAGE = [b"k = [\n\x00", b'"bad\\nkey" = 1\n', b"k = 0\nk = ''\n", b"index = 5\nk = 'many'\n",
               b"\xff\xfe"]


def test_cli_with_a_garbage_funnel_toml(tally, tmp_path):
    """Through the real CLI: a one-line error, a non-zero exit, no traceback."""
    failed = 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUNNEL_")}
    funnel = Path(sys.executable).with_name("funnel")
    try:
        for raw in CLI_GARBAGE:
            (tmp_path / "funnel.toml").write_bytes(raw)
            done = subprocess.run([str(funnel), "search", "anything"], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=120, check=False)
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            traceback = "Traceback" in done.stderr + done.stdout
            ok = done.returncode not in (0, 70) and not traceback and len(lines) == 1
            failed += not ok
            assert ok, (raw, done.returncode, done.stderr[-2000:])
    finally:
        tally.add("fuzz", "CLI with a garbage funnel.toml", tried=len(CLI_GARBAGE), failed=failed)


# --- the HTTP API -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """The app in-process: a collection `fz` with one document, and triage over a two-file repository."""
    from fastapi.testclient import TestClient

    from funnel.apps.api import create_app
    from funnel.apps.state.incidents import EmbeddedIncidents
    from funnel.apps.triage.service import TriageService
    from funnel.embed import HashingEmbedder
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    tmp = tmp_path_factory.mktemp("fuzz-api")
    repo = tmp / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "users.py").write_text("def get_user(uid):\n    raise KeyError(uid)\n")
    (repo / "app" / "orders.py").write_text(
        "from app.users import get_user\n\ndef order(uid):\n    get_user(uid)\n")
    pipeline = Pipeline.build(store=LanceStore(tmp / "repo-index"), embedder=HashingEmbedder(), reranker=None)
    pipeline.ingest([repo])
    triage = TriageService(pipeline, repo_root=repo, incidents=EmbeddedIncidents(tmp / "incidents.sqlite"))
    app = create_app(Settings(embedder="hashing", reranker="lexical", data_dir=tmp / "data", max_upload_mb=2),
                     triage=triage)
    with TestClient(app, raise_server_exceptions=True) as client:
        assert client.post("/v1/collections", json={"name": "fz"}).status_code == 201
        note = b"# Zentara\n\nIris Kallas is the CEO of Zentara.\n"
        response = client.post("/v1/collections/fz/documents", files=[("file", ("notes.md", note))])
        assert response.status_code == 202, response.text
        wait_done(client, "fz", timeout=120)
        ask = {"question": "Who is the CEO of Zentara?", "conversation_id": "fz-chat"}
        assert client.post("/v1/collections/fz/ask", json=ask).status_code == 200  # a conversation to rename
        yield client, app


def assert_error_body(response: httpx.Response) -> None:
    """A 4xx with a JSON body whose messages are one line each."""
    assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    assert 400 <= response.status_code, response.status_code
    body = response.json()
    detail = body["detail"]
    if isinstance(detail, str):
        one_line(detail)
    else:
        assert isinstance(detail, list) and detail
        for problem in detail:
            one_line(problem["msg"])


def json_routes(app) -> dict[str, dict]:
    """Every POST/PUT/PATCH route that takes a body, from the OpenAPI schema: path -> its body schema."""
    schema = app.openapi()
    routes = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method in ("post", "put", "patch") and "requestBody" in operation:
                (media, content), = operation["requestBody"]["content"].items()
                ref = content["schema"]["$ref"].rsplit("/", 1)[-1]
                routes[f"{method.upper()} {path}"] = (media, schema["components"]["schemas"][ref])
    return routes


FIELD_VALUES = st.one_of(JSON, TEXT, st.just("q" * 200_000), st.just("Zentara CEO"), st.integers(-5, 200),
                         st.lists(st.one_of(TEXT, st.fixed_dictionaries({"text": TEXT})), max_size=4))


SHORT_TEXT = st.one_of(st.just("Zentara CEO"), st.just("Iris Kallas"), st.text(min_size=1, max_size=60),
                       NASTY, st.just("x" * 7999), st.just("Zentara " * 900))
# Values that pass (or nearly pass) validation, by field name, so most inputs reach the handler.
NEAR_VALID = {
    "query": SHORT_TEXT, "question": SHORT_TEXT, "name": st.one_of(
        st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True), SHORT_TEXT),
    "k": st.one_of(st.integers(1, 100), st.none(), st.integers()),
    "policy": st.one_of(st.none(), SHORT_TEXT,
                        st.sampled_from(["none", "replace", "guaranteed_slots", "rrf", "auto", "RRF"])),
    "explain": st.booleans(), "stream": st.one_of(st.none(), st.booleans()),
    "conversation_id": st.one_of(st.none(), SHORT_TEXT, st.just("fz-chat"),
                                 st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)),
    "model": st.one_of(st.none(), SHORT_TEXT),
    "documents": st.lists(st.one_of(SHORT_TEXT, st.fixed_dictionaries({"text": SHORT_TEXT}), st.just("")),
                          max_size=12),
    "top_n": st.one_of(st.none(), st.integers(1, 20), st.integers()),
    "return_documents": st.booleans(),
    "service": st.one_of(st.just("shop"), st.text(max_size=200)),
    "message": st.one_of(st.just("checkout failed"), st.text(max_size=300), NASTY),
    "stack_trace": st.one_of(TRACES, st.just("Traceback (most recent call last):\n" * 3000)),
    "context": st.dictionaries(st.text(max_size=10), st.text(max_size=30), max_size=3),
    "input": st.one_of(SHORT_TEXT, st.lists(SHORT_TEXT, max_size=5), st.lists(st.integers(), max_size=3),
                       st.just([""])),
    "encoding_format": st.sampled_from(["float", "base64", "int8", ""]),
    "dimensions": st.one_of(st.none(), st.just(64), st.integers(-3, 2000)),
    "user": st.one_of(st.none(), SHORT_TEXT),
    "title": st.one_of(SHORT_TEXT, st.just(" "), st.just("t" * 201)),
    "role": st.sampled_from(["reader", "writer", "admin", "Admin", "root", ""]),
    "collections": st.one_of(st.none(), st.lists(st.one_of(st.just("fz"), SHORT_TEXT), max_size=4)),
    "expires_days": st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-5, 40000)),
    "rpm": st.one_of(st.none(), st.integers(-5, 2_000_000), st.floats(allow_nan=False)),
    "upload_mb_per_day": st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-5, 20_000_000)),
}


def near_valid(schema: dict):
    """Bodies with every required field and some optional ones; now and then a field of the wrong type."""
    # One field in eight, a value of any type (an integer draw: one_of picks its first arm too often).
    fields = {name: st.integers(0, 7).flatmap(lambda i, name=name: JSON if i == 5 else NEAR_VALID[name])
              for name in schema.get("properties", {})}
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: v for k, v in fields.items() if k in required},
        optional={k: v for k, v in fields.items() if k not in required},
    ).map(json.dumps)


def bodies(schema: dict):
    properties = sorted(schema.get("properties", {})) or ["x"]
    return st.one_of(
        *[near_valid(schema)] * 4,
        st.dictionaries(st.sampled_from(properties), FIELD_VALUES, max_size=len(properties)).map(json.dumps),
        JSON.map(json.dumps),
        st.sampled_from([deep(10_000), '{"query": ', "", "{}", "null", huge_int_json(),
                         '{"query": "a"' + "}" * 3,
                         '{"query": "\\ud800"}', "\x00", '{"a": ' * 2000]),
        st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    )


def test_api_request_bodies(tally, api):
    client, app = api
    routes = json_routes(app)
    assert set(routes) == {
        "POST /v1/rerank", "POST /api/rerank", "POST /v1/embeddings", "POST /v1/collections",
        "POST /v1/collections/{name}/documents",
        "POST /v1/collections/{name}/search", "POST /v1/collections/{name}/ask", "POST /v1/errors",
        "PATCH /v1/collections/{name}/conversations/{conversation_id}", "POST /v1/keys",
    }, "a new route with a body: add it to the fuzzing"
    json_bodies = {path: schema for path, (media, schema) in routes.items() if media == "application/json"}
    for route, schema in json_bodies.items():
        new = set(schema.get("properties", {})) - set(NEAR_VALID)
        assert not new, f"{route}: new fields {new}; add them to NEAR_VALID"
    strategy = st.sampled_from(sorted(json_bodies)).flatmap(
        lambda route: st.tuples(st.just(route), bodies(json_bodies[route]),
                                st.sampled_from(["fz", "fz", "fz", "none", "Bad Name"]), st.booleans()))

    def check(case):
        route, body, collection, stream = case
        headers = {"content-type": "application/json"}
        if stream:
            headers["accept"] = "text/event-stream"
        content = body.encode("utf-8", "surrogatepass")
        method, path = route.split(" ", 1)
        # A conversation that exists (the fuzzed asks use it too), or one that does not.
        path = path.replace("{name}", collection).replace("{conversation_id}", "fz-chat" if stream else "nope")
        response = client.request(method, path, content=content, headers=headers)
        if response.status_code < 300:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                assert "event: error" not in response.text or '"detail"' in response.text
            else:
                response.json()
        else:
            assert_error_body(response)
        return f"{route} {response.status_code}"

    fuzz(tally, "API request bodies (every JSON route)", strategy, check, short=300, soak=5000, examples=[
        ("POST /v1/collections/{name}/search", deep(10_000), "fz", False),
        # the audit log read a new collection's name from this body: a RecursionError, a 500 before the fix
        ("POST /v1/collections", deep(10_000), "fz", False),
        # a document with a lone surrogate, echoed back, was a 500 (PydanticSerializationError) before the fix
        ("POST /v1/rerank", '{"query": "a", "documents": ["\\ud800"], "return_documents": true}', "fz", False),
        ("POST /v1/rerank", '{"query": "a", "documents": [{"text": "\\udfff"}], "return_documents": true}', "fz",
         False),
        ("POST /v1/errors", json.dumps({"stack_trace": "Traceback (most recent call last):\n" * 2000}),
         "fz", False),
    ])


def query_routes(app) -> dict[str, list[str]]:
    """Every route that takes query parameters, from the OpenAPI schema: route -> the parameters' names."""
    routes = {}
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            names = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "query"]
            if names:
                routes[f"{method.upper()} {path}"] = names
    return routes


QUERY_VALUES = st.one_of(
    st.integers(-5, 20_000).map(str), st.integers().map(str), st.floats().map(str), TEXT,
    st.sampled_from(["2026-12-05T00:00:00Z", "2026-12-05", "2026-13-45", "1e400", "0x10", "9" * 400, "shop",
                     "1796463000.5", "+01:00", "T", "Z"]),
)


def test_api_query_parameters(tally, api):
    client, app = api
    routes = query_routes(app)
    assert set(routes) == {
        "GET /v1/collections/{name}/conversations", "GET /v1/incidents", "GET /v1/audit",
    }, "a new route with query parameters: add it to the fuzzing"
    strategy = st.sampled_from(sorted(routes)).flatmap(lambda route: st.tuples(
        st.just(route), st.lists(st.tuples(st.sampled_from([*routes[route], "x"]), QUERY_VALUES), max_size=4)))

    def check(case):
        route, params = case
        path = route.split(" ", 1)[1].replace("{name}", "fz")
        query = "&".join(f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}" for k, v in params)
        response = client.get(f"{path}?{query}")
        if response.status_code < 300:
            response.json()
        else:
            assert_error_body(response)
        return f"{route} {response.status_code}"

    fuzz(tally, "API query parameters (every route that takes them)", strategy, check, short=150, soak=3000,
         examples=[("GET /v1/audit", [("since", "\ud800"), ("limit", "1")]),
                   ("GET /v1/audit", [("since", "9" * 400)])])


# --- uploads ------------------------------------------------------------------------------------------------


def small_pdf() -> bytes:
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out)
    pdf.drawString(72, 720, "Iris Kallas is the CEO of Zentara Robotics.")
    pdf.showPage()
    pdf.drawString(72, 720, "Page two.")
    pdf.save()
    return out.getvalue()


PDF = small_pdf()


CONTENT = st.one_of(st.binary(max_size=3000), damaged(PDF), st.just(PDF),
                    st.binary(max_size=50).map(lambda b: b"%PDF-" + b),
                    st.text(max_size=500).map(lambda t: t.encode("utf-8", "surrogatepass")),
                    st.text(max_size=300).map(lambda t: t.encode("utf-16")))
UPLOADS = st.tuples(
    st.sampled_from(["a.pdf", "b.md", "c.txt", "../../d.txt", "e.PDF", "f.md\x00.pdf", "", "g"]), CONTENT)


def test_uploads_through_the_api(tally, api):
    client, _ = api

    def check(case):
        name, raw = case
        response = client.post("/v1/collections/fz/documents", files=[("file", (name, raw))])
        if response.status_code != 202:
            assert_error_body(response)
            return response.status_code
        (record,) = response.json()
        docs = {d["id"]: d for d in wait_done(client, "fz", timeout=120)}
        doc = docs[record["id"]]
        if doc["status"] == "failed":
            one_line(doc["error"])
            assert doc["chunks"] == 0
        else:
            assert doc["status"] == "ready" and doc["chunks"] > 0, doc
        # The index stays consistent: the collection's count is the sum of its ready documents'.
        (summary,) = [c for c in client.get("/v1/collections").json() if c["name"] == "fz"]
        assert summary["chunks"] == sum(d["chunks"] for d in docs.values() if d["status"] == "ready"), summary
        assert client.post("/v1/collections/fz/search", json={"query": "Zentara"}).status_code == 200
        return f"202 {doc['status']}"

    fuzz(tally, "uploads through the API (random bytes as .pdf/.md/.txt, mutated PDFs)", UPLOADS, check,
         short=60, soak=1000)


# --- upstream response parsers ------------------------------------------------------------------------------


RESPONSE_STATUS = st.one_of(st.just(200),
                            st.sampled_from([200, 200, 201, 204, 301, 400, 404, 429, 500, 502, 503]))


def candidates(n: int) -> list[Candidate]:
    return [Candidate(Chunk(chunk_id=f"c{i}", doc_id=f"d{i}", ordinal=0, text=f"text {i}", path="", title="",
                            kind="text", n_tokens=2), fused_rank=i + 1, fused_score=0.0) for i in range(n)]


def mock_client(status: int, body: bytes, headers: dict | None = None) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(status, content=body, headers=headers or {})))


def whole_or_truncated(text: str):
    """The body as served, or cut at any point (a connection that dropped mid-body)."""
    cut = st.integers(0, max(0, len(text) - 1)).map(lambda n: text[:n].encode("utf-8", "replace"))
    return st.one_of(st.just(text.encode("utf-8", "surrogatepass")), cut)


def rerank_results(key: str):
    item = st.one_of(
        st.fixed_dictionaries({"index": st.one_of(st.integers(-1, 4), JSON), key: st.one_of(
            st.floats(allow_nan=True, allow_infinity=True), JSON)}),
        st.fixed_dictionaries({"index": st.integers(0, 3), key: st.floats(-50, 50)}),
        JSON,
    )
    return st.lists(item, max_size=6)


RERANK_BODIES = st.one_of(
    st.builds(lambda items, key: json.dumps({key: items}), rerank_results("relevance_score"),
              st.sampled_from(["results", "data", "x"])),
    rerank_results("score").map(json.dumps),
    JSON.map(json.dumps),
    st.just(json.dumps({"results": [{"index": i, "relevance_score": 0.5} for i in range(4)]})),
    st.sampled_from([deep(100_000), huge_int_json(), '{"results": [', "<html><h1>502</h1></html>", "",
                     "\ud800"]),
).flatmap(whole_or_truncated)


@st.composite
def well_formed_rerank(draw, n: int) -> bytes:
    """Every index once, scores of any size (logits too), under each API's key or as a bare list."""
    order = draw(st.permutations(range(n)))
    scores = st.one_of(st.floats(0, 1), st.floats(-1e308, 1e308), st.integers(-10**6, 10**6))
    items = [{"index": i, "relevance_score": draw(scores), "score": draw(scores)} for i in order]
    shape = draw(st.sampled_from(["results", "data", "list"]))
    return json.dumps(items if shape == "list" else {shape: items}).encode()


def test_http_rerank_response_parsers(tally):
    from funnel.rerank.http import HttpReranker

    def check(case):
        api, status, body, n = case
        reranker = HttpReranker(api, "http://rerank.test", model="m", client=mock_client(status, body))
        try:
            result = reranker.rerank("query", candidates(n))
        except BaseException as e:  # noqa: BLE001
            expect_funnel_error(e)
            assert isinstance(e, UpstreamError), e
            return type(e).__name__
        assert len(result.scores) == n and all(0.0 <= s <= 1.0 for s in result.scores), result
        return "ok"

    apis = st.sampled_from(["ollama", "cohere", "tei", "infinity"])
    cases = st.one_of(
        st.tuples(apis, RESPONSE_STATUS, RERANK_BODIES, st.integers(1, 4)),
        st.integers(1, 4).flatmap(lambda n: st.tuples(apis, st.just(200), well_formed_rerank(n), st.just(n))),
    )
    fuzz(tally, "HTTP rerank response parsers (ollama, cohere, tei, infinity)", cases, check,
         short=400, soak=6000,
         examples=[("cohere", 200, deep(100_000).encode(), 2)])  # RecursionError before the fix


def openai_body(draw_json):
    message = st.fixed_dictionaries({}, optional={"content": st.one_of(TEXT, JSON), "tool_calls": st.one_of(
        JSON, st.lists(st.fixed_dictionaries({"function": st.fixed_dictionaries(
            {"name": st.one_of(TEXT, JSON)}, optional={"arguments": st.one_of(
                TEXT, JSON, st.just('{"a": 1'), st.just(huge_int_json()), st.just(deep(100_000)))})},
            optional={"id": JSON, "index": JSON}), max_size=3))})
    choice = st.fixed_dictionaries({}, optional={
        "message": st.one_of(message, JSON), "delta": st.one_of(message, JSON), "text": st.one_of(TEXT, JSON),
        "finish_reason": JSON})
    return st.one_of(
        st.fixed_dictionaries({}, optional={"choices": st.one_of(st.lists(choice, max_size=2), JSON),
                                            "usage": JSON, "model": JSON, "error": JSON}),
        st.fixed_dictionaries({}, optional={"message": st.one_of(message, JSON), "done": st.one_of(
            st.just(True), JSON), "error": JSON, "prompt_eval_count": JSON, "model": JSON}),
        draw_json,
    )


LLM_JSON = openai_body(JSON)
CONTENT_TEXT = st.one_of(TEXT, st.none())
WELL_FORMED_LLM = st.one_of(
    CONTENT_TEXT.map(lambda c: json.dumps({"choices": [{"message": {"content": c}, "text": c}]})),
    CONTENT_TEXT.map(lambda c: json.dumps({"message": {"content": c}, "done": True})),
    st.lists(CONTENT_TEXT, max_size=5).map(lambda parts: "\n\n".join(
        [f"data: {json.dumps({'choices': [{'delta': {'content': p}, 'text': p}]})}" for p in parts]
        + ["data: [DONE]"])),
    st.lists(CONTENT_TEXT, max_size=5).map(lambda parts: "\n".join(
        [json.dumps({"message": {"content": p}, "done": False}) for p in parts] + ['{"done": true}'])),
)
LLM_BODIES = st.one_of(
    WELL_FORMED_LLM, WELL_FORMED_LLM,
    LLM_JSON.map(json.dumps),
    st.lists(st.one_of(LLM_JSON.map(lambda v: "data: " + json.dumps(v)), st.just("data: [DONE]"),
                       st.just(": ping"), TEXT, st.just("data: " + deep(100_000)),
                       st.just("data: " + huge_int_json())), max_size=8).map("\n\n".join),
    st.lists(st.one_of(LLM_JSON.map(json.dumps), st.just('{"done": true}'), TEXT), max_size=8).map("\n".join),
    st.sampled_from([deep(100_000), huge_int_json(), "", '{"choices": [{"message": {"content": "a']),
).flatmap(whole_or_truncated)


def test_llm_response_parsers(tally):
    from funnel.generate.chat import ChatMessage, ChatReply, ToolSpec
    from funnel.generate.ollama import OllamaChat
    from funnel.generate.openai_compat import OpenAIChat

    messages = [ChatMessage("user", "hi")]
    tools = [ToolSpec("read_file", "read a file", {"type": "object", "properties": {}})]

    def check(case):
        backend, mode, status, body = case
        media = "text/event-stream" if mode == "stream" else "application/json"
        client = mock_client(status, body, {"content-type": media})
        if backend == "ollama":
            chat = OllamaChat("http://llm.test", model="m", client=client)
        else:
            chat = OpenAIChat("http://llm.test/v1", model="m", client=client,
                              completion_prompt=backend == "completion")
        try:
            if mode == "chat":
                reply = chat.chat(messages, tools if backend != "completion" else ())
            else:
                stream = chat.stream(messages, tools=tools if backend != "completion" else ())
                deltas = list(stream)
                reply = stream.reply
                assert all(isinstance(d, str) for d in deltas)
        except BaseException as e:  # noqa: BLE001
            expect_funnel_error(e)
            assert isinstance(e, UpstreamError), e
            return type(e).__name__
        assert isinstance(reply, ChatReply) and isinstance(reply.content, str)
        return "ok"

    fuzz(tally, "LLM response parsers (openai chat/completions, ollama; JSON and streams)",
         st.tuples(st.sampled_from(["openai", "completion", "ollama"]), st.sampled_from(["chat", "stream"]),
                   RESPONSE_STATUS, LLM_BODIES), check, short=400, soak=6000,
         examples=[("openai", "chat", 200, deep(100_000).encode()),  # RecursionError before the fix
                   ("ollama", "stream", 200, deep(100_000).encode()),
                   ("openai", "chat", 200, json.dumps({"choices": [{"message": {"tool_calls": [
                       {"function": {"name": "f", "arguments": huge_int_json()}}]}}]}).encode()),
                   # a tool name with a newline made a two-line UpstreamError before the fix
                   ("openai", "chat", 200, json.dumps({"choices": [{"message": {"tool_calls": [
                       {"function": {"name": "a\nb", "arguments": "{"}}]}}]}).encode())])


SUSPECTED = st.fixed_dictionaries({"path": st.one_of(st.just("app/a.py"), JSON)},
                                  optional={"line_start": JSON, "line_end": JSON, "reason": JSON})
ANALYSIS = st.fixed_dictionaries({}, optional={
    "summary": JSON, "root_cause": JSON, "suspected_files": st.one_of(JSON, st.lists(SUSPECTED, max_size=3)),
    "fix": JSON, "confidence": JSON})
AGENT_REPLIES = st.one_of(
    st.text(max_size=300), JSON.map(json.dumps),
    ANALYSIS.map(lambda v: "```json\n" + json.dumps(v) + "\n```"),
    st.sampled_from(["{" + '"a": ' * 3000 + "1" + "}" * 3000, '{"summary": ' + "1" * 5000 + "}", "{}",
                     "{ }}"]),
)


def test_llm_answer_parsers(tally):
    """What funnel reads out of a model's text: the triage agent's JSON analysis, an answer's citations."""
    from funnel.apps.triage.agent import _parse
    from funnel.generate.llm import Passage, cited

    passages = tuple(Passage(i + 1, c.chunk, c.chunk.text, 2) for i, c in enumerate(candidates(3)))

    def check(text):
        analysis, note = _parse(text, {"app/a.py"})
        assert isinstance(note, str)
        if analysis is None:
            one_line(note)
        citations, unknown = cited(text, passages)
        assert all(1 <= c.number <= 3 for c in citations) and not any(1 <= n <= 3 for n in unknown)

    fuzz(tally, "LLM answer parsers (triage analysis JSON, citations)", AGENT_REPLIES, check,
         short=300, soak=5000, examples=[
             '{"summary": ' + "1" * 5000 + "}",  # ValueError (over 4300 digits) before the fix
             "{" + '"a": ' * 3000 + "1" + "}" * 3000,  # RecursionError before the fix
             "the answer [" + "9" * 5000 + "]"])  # a citation's int(): ValueError before the fix


def test_slack_response_handling(tally):
    from funnel.apps.state.incident_schema import AnalysisStatus, TriageResult
    from funnel.apps.triage.slack import Delivery, SlackNotifier, _retry_after

    result = TriageResult(service="shop", exception_type="KeyError", message="boom", fingerprint="f" * 16,
                          files=[], analysis_status=AnalysisStatus.LLM_UNAVAILABLE)
    printable = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
    odd = st.sampled_from(["nan", "inf", "-1", "1e999", "Wed, 21 Oct 2015 07:28:00 GMT",
                           "Wed, 21 Oct 2015 07:28:00 -0000", "Mon, 99 Foo 99999"])
    headers = st.dictionaries(st.sampled_from(["retry-after", "content-type", "x"]),
                              st.one_of(printable, odd), max_size=2)

    def check(case):
        status, body, header = case
        notifier = SlackNotifier("https://hooks.slack.test/services/T0/B0/SECRET",
                                 mock_client(status, body, header), sleep=lambda s: None, max_retries=2,
                                 dedupe_window_s=0, rate_per_minute=10**6)
        delivery = notifier.notify(result)
        assert isinstance(delivery, Delivery)
        one_line(delivery.detail)
        assert "SECRET" not in delivery.detail
        delay = _retry_after(header.get("retry-after"), 0.5)
        assert 0.0 <= delay <= 30.0

    fuzz(tally, "Slack webhook responses", st.tuples(RESPONSE_STATUS, st.binary(max_size=300), headers),
         check, short=200, soak=3000)
