"""The CLI as a user runs it: one-line errors, meaningful exit codes, no tracebacks."""

import json
import os
import subprocess
import sys

import pytest
from upstream_support import fake  # noqa: F401 (a fixture)

FUNNEL = [sys.executable, "-c", "from funnel.apps.cli import run; run()"]


def funnel(*args, cwd, env=None, input=None):
    full_env = {**os.environ, "FUNNEL_EMBEDDER": "hashing", **(env or {})}
    return subprocess.run([*FUNNEL, *args], cwd=cwd, capture_output=True, text=True, env=full_env, timeout=120, input=input)


@pytest.fixture
def docs(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    (d / "acme.txt").write_text("The CEO of Acme is Jane Roe. Acme makes anvils.\n")
    (d / "bad.pdf").write_bytes(b"%PDF-1.7\n garbage")
    (d / "blob.txt").write_bytes(bytes(range(256)) * 10)
    loop = d / "loop"
    loop.symlink_to(d, target_is_directory=True)
    return d


def no_traceback(result):
    assert "Traceback" not in result.stderr + result.stdout


def test_ingest_reports_bad_files_and_goes_on(tmp_path, docs):
    result = funnel("ingest", str(docs), str(tmp_path / "missing"), cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 1
    assert "bad.pdf" in result.stderr and "blob.txt" in result.stderr and "missing" in result.stderr
    assert "1 added" in result.stdout
    answer = funnel("ask", "Who is the CEO of Acme?", cwd=tmp_path)
    assert answer.returncode == 0 and "Jane Roe" in answer.stdout and "[1]" in answer.stdout


def test_search_before_ingest_is_a_clear_error(tmp_path):
    result = funnel("search", "anything", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 5 and "funnel ingest" in result.stderr


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["search", ""], {}, "query is empty"),
        (["search", "x", "--policy", "smart"], {}, "policy"),
        (["search", "x", "--k", "0"], {}, "k"),
        (["search", "x"], {"FUNNEL_SEARCH__RRF_K": "-1"}, "rrf_k"),
        (["search", "x"], {"FUNNEL_EMBEDDER": "nonsense"}, "unknown embedder"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, docs, args, env, message):
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path)
    result = funnel(*args, cwd=tmp_path, env=env)
    no_traceback(result)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_huge_query_is_answered(tmp_path, docs):
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path)
    result = funnel("search", "anvils " * 15_000, "--json", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 0 and "acme.txt" in result.stdout


def test_settings_from_toml_and_flags(tmp_path, docs):
    (tmp_path / "funnel.toml").write_text('index = "from_toml"\nk = 1\n')
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path)
    assert (tmp_path / "from_toml" / "funnel_index.json").is_file()
    (tmp_path / "funnel.toml").write_text('k = "many"\n')
    result = funnel("search", "anvils", cwd=tmp_path)
    assert result.returncode == 2 and "k" in result.stderr
    no_traceback(result)


def test_explain_shows_every_stage(tmp_path, docs):
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path)
    result = funnel("search", "CEO of Acme", "--explain", cwd=tmp_path)
    assert result.returncode == 0
    for column in ("bm25", "dense", "fused", "rerank score", "slot", "final"):
        assert column in result.stdout
    assert "rerank: skipped" in result.stderr


def test_markup_like_text_in_documents_is_printed_verbatim(tmp_path):
    (tmp_path / "c.txt").write_text("Intro line.\nThe config uses [/red] tags and [bold]x[/bold].\n")
    funnel("ingest", "c.txt", cwd=tmp_path)
    result = funnel("search", "config tags", "--explain", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 0 and "[/red]" in result.stdout and "[bold]x[/bold]" in result.stdout


def test_search_uses_the_embedder_the_index_was_built_with(tmp_path, docs):
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path, env={"FUNNEL_EMBEDDER": "hashing-32"})
    env = {k: v for k, v in os.environ.items() if k != "FUNNEL_EMBEDDER"}
    result = subprocess.run([*FUNNEL, "search", "anvils"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0 and "acme.txt" in result.stdout, result.stderr
    mismatch = funnel("search", "anvils", cwd=tmp_path, env={"FUNNEL_EMBEDDER": "hashing-48"})
    assert mismatch.returncode == 2 and "built with embedder" in mismatch.stderr


def test_index_path_that_is_a_file_and_empty_path_argument(tmp_path, docs):
    (tmp_path / "afile").write_text("x")
    result = funnel("ingest", str(docs / "acme.txt"), "--index", "afile", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 5 and "is a file" in result.stderr
    result = funnel("ingest", "", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2 and "empty path" in result.stderr


def test_unknown_option_is_a_usage_error(tmp_path):
    result = funnel("search", "x", "--bogus", cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2 and "No such option" in result.stderr


@pytest.mark.model
def test_builtin_reranker_from_the_cli(tmp_path, docs):
    env = {"FUNNEL_EMBEDDER": "minilm"}
    funnel("ingest", str(docs / "acme.txt"), cwd=tmp_path, env=env)
    result = funnel("search", "CEO of Acme", "--reranker", "builtin", "--policy", "rrf", "--explain", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "rerank: ok" in result.stderr and "acme.txt" in result.stdout


def test_ask_with_an_llm_that_is_down_answers_extractively_and_says_why(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Zentara\n\nIris Kallas is the CEO of Zentara Robotics.\n")
    assert funnel("ingest", str(docs), "--index", str(tmp_path / "idx"), cwd=tmp_path).returncode == 0
    result = funnel("ask", "Who is the CEO of Zentara?", "--index", str(tmp_path / "idx"), "--json",
                    "--llm", "openai:http://127.0.0.1:9/v1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["generator"] == "extractive" and "cannot reach" in data["fallback_reason"]
    assert "Iris Kallas" in data["answer"]


# --- calibration ------------------------------------------------------------------------------------------

def _many_docs(root, n=30):
    words = ("river mountain forest desert ocean valley canyon glacier meadow island harbor bridge tower "
             "engine turbine piston valve gasket rotor stator bearing spindle gear lever pulley spring").split()
    root.mkdir()
    for i in range(n):
        sentences = [" ".join(words[(i * 7 + j * 3 + k) % len(words)] for k in range(9)).capitalize() + "."
                     for j in range(5)]
        (root / f"doc{i:02d}.md").write_text(f"# Notes on item number {i} of the series\n\n" + " ".join(sentences))
    return root


def test_ingest_calibrates_and_search_explains_the_choice(tmp_path):
    docs = _many_docs(tmp_path / "many")
    env = {"FUNNEL_RERANK__BACKEND": "lexical"}
    ingest = funnel("ingest", str(docs), cwd=tmp_path, env=env)
    no_traceback(ingest)
    assert ingest.returncode == 0, ingest.stderr
    assert "calibrated (" in ingest.stdout and "second stage" in ingest.stdout
    stored = json.loads((tmp_path / ".funnel" / "funnel_calibration.json").read_text())
    assert stored["reranker"] == "lexical" and stored["queries"] >= 20
    explained = funnel("search", "turbine piston valve", "--explain", cwd=tmp_path, env=env)
    assert explained.returncode == 0 and "calibration (" in explained.stdout
    assert "policy auto: " in explained.stderr
    unchanged = funnel("ingest", str(docs), cwd=tmp_path, env=env)  # nothing changed: no recalibration
    assert "calibrated" not in unchanged.stdout
    other = funnel("search", "turbine", "--explain", "--reranker", "none", cwd=tmp_path)
    assert "no reranker configured" in other.stderr

    again = funnel("calibrate", "--json", "--queries", "25", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    body = json.loads(again.stdout[again.stdout.index("{"):])
    assert body["queries"] == 25 and body["policy"] in ("none", "rrf", "replace", "guaranteed_slots")


def test_calibrate_on_judged_queries_and_back(tmp_path):
    docs = _many_docs(tmp_path / "many")
    env = {"FUNNEL_RERANK__BACKEND": "lexical"}
    assert funnel("ingest", str(docs), "--no-calibrate", cwd=tmp_path, env=env).returncode == 0
    judged = tmp_path / "judged.jsonl"
    # Documents named by relative path, as a user would type them from the folder they ingested.
    judged.write_text("".join(
        json.dumps({"query": f"notes on item number {i} of the series", "relevant": [f"many/doc{i:02d}.md"]}) + "\n"
        for i in range(25)
    ))
    done = funnel("calibrate", "--judged", str(judged), "--json", cwd=tmp_path, env=env)
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)  # --json: nothing else on standard output
    assert body["source"] == "judged" and body["queries"] == 25 and len(body["judged"]) == 25
    assert "on 25 judged queries" in body["reason"]
    explained = funnel("search", "turbine", "--explain", cwd=tmp_path, env=env)
    assert "25 queries" in explained.stdout and "judged queries" in explained.stdout

    back = funnel("calibrate", "--generated", "--queries", "25", "--json", cwd=tmp_path, env=env)
    assert json.loads(back.stdout[back.stdout.index("{"):])["source"] == "generated"

    both = funnel("calibrate", "--judged", str(judged), "--generated", cwd=tmp_path, env=env)
    assert both.returncode == 2 and "does not go with --generated" in both.stderr
    judged.write_text('{"query": "q"}\n')
    bad = funnel("calibrate", "--judged", str(judged), cwd=tmp_path, env=env)
    no_traceback(bad)
    assert bad.returncode == 2 and 'judged.jsonl:1: "relevant" must be' in bad.stderr
    judged.write_text(json.dumps({"query": "q", "relevant": ["many/elsewhere.md"]}) + "\n")
    nowhere = funnel("calibrate", "--judged", str(judged), cwd=tmp_path, env=env)
    assert nowhere.returncode == 2 and "only 0 of 1 judged queries name a document" in nowhere.stderr
    stored = json.loads((tmp_path / ".funnel" / "funnel_calibration.json").read_text())
    assert stored["source"] == "generated"  # a refused calibration changes nothing


def test_an_index_keeps_its_analyzer_and_says_the_first_stage_it_runs(tmp_path):
    docs = tmp_path / "ko"
    docs.mkdir()
    (docs / "규정.md").write_text("# 출장 규정\n\n해외 출장은 재무팀장의 별도 승인이 필요합니다. 숙박비는 1박에 12만 원까지입니다.\n")
    made = funnel("ingest", str(docs), "--analyzer", "cjk", "--reranker", "none", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "calibrated (" in made.stdout and "first stage" in made.stdout  # no reranker: the first stage alone
    other = funnel("ingest", str(docs), "--analyzer", "english", cwd=tmp_path)
    no_traceback(other)
    assert other.returncode == 2 and "analyzed with cjk, not english" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
    bad = funnel("ingest", str(docs), "--analyzer", "klingon", cwd=tmp_path)
    assert bad.returncode == 2 and "must be one of auto, english, cjk, korean" in bad.stderr
    found = funnel("search", "재무팀장 승인", "--reranker", "none", cwd=tmp_path)
    assert found.returncode == 0 and "규정.md" in found.stdout and "first stage: " in found.stderr


def test_calibrate_errors_are_one_line(tmp_path):
    empty = funnel("calibrate", "--reranker", "lexical", cwd=tmp_path)
    no_traceback(empty)
    assert empty.returncode == 5 and "run `funnel ingest PATH` first" in empty.stderr
    # Without a reranker there is still a first stage to choose: the same error as any calibration of nothing.
    none = funnel("calibrate", "--reranker", "none", cwd=tmp_path)
    no_traceback(none)
    assert none.returncode == 5 and "run `funnel ingest PATH` first" in none.stderr


def test_an_ingest_succeeds_when_its_calibration_cannot_run(tmp_path):
    docs = _many_docs(tmp_path / "many")
    down = {"FUNNEL_RERANK__BACKEND": "tei:http://127.0.0.1:9", "FUNNEL_RERANK__TIMEOUT_S": "2"}
    ingest = funnel("ingest", str(docs), cwd=tmp_path, env=down)
    no_traceback(ingest)
    assert ingest.returncode == 0 and "30 added" in ingest.stdout
    assert "warning: calibration stopped: tei:http://127.0.0.1:9" in ingest.stderr
    search = funnel("search", "turbine", cwd=tmp_path, env=down)
    assert search.returncode == 0 and "the index is not calibrated" in search.stderr


def test_a_ctrl_c_while_the_cli_loads_is_one_line(tmp_path):
    # The console script's module imports nothing heavy: a Ctrl-C in the seconds LanceDB and onnxruntime
    # take to load printed a traceback (issue 17, crash consistency). The child says "ready" when `run()` has
    # started importing the CLI (an audit hook on that import), so the Ctrl-C cannot land before `run()`: a
    # "ready" printed before the call left a few bytecodes in which a loaded machine delivered it (seen once).
    import signal

    code = (
        "import sys\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'funnel.apps.cli' and not hasattr(hook, 'said'):\n"
        "        hook.said = True\n"
        "        print('ready', file=sys.stderr, flush=True)\n"
        "sys.addaudithook(hook)\n"
        "from funnel.apps.main import run\n"
        "run()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code, "search", "anvils", "--index", str(tmp_path / "index")],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "FUNNEL_EMBEDDER": "hashing"})
    assert process.stderr.readline() == "ready\n"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert "Traceback" not in out + err
    assert process.returncode == 130 and err.strip().splitlines() == ["interrupted"], err


def ingest_after(prelude: str, tmp_path, docs):
    """`funnel ingest acme.txt` in a fresh interpreter that first runs `prelude` (which arranges a Ctrl-C);
    the result, checked for tracebacks."""
    code = prelude + "from funnel.apps.cli import run\nrun()\n"
    result = subprocess.run([sys.executable, "-c", code, "ingest", str(docs / "acme.txt"), "--no-calibrate"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "FUNNEL_EMBEDDER": "hashing"})
    no_traceback(result)
    return result


def test_a_ctrl_c_inside_a_finalizer_after_the_work_stops_the_command_with_one_line(tmp_path, docs):
    # CI's crash suite: the Ctrl-C landed while psycopg's connection was being collected, after the ingest
    # had committed; Python printed "Exception ignored in BaseConnection.__del__" with a traceback and
    # dropped the Ctrl-C. Here a finalizer that runs right after the ingest's summary gets the Ctrl-C.
    code = ("import os, signal, time\n"
            "class Held:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        time.sleep(2)\n"
            "import funnel.apps.cli.indexing as indexing\n"
            "said = indexing.out.print\n"
            "def say_then_collect(*a, **k):\n"
            "    said(*a, **k)\n"
            "    Held()\n"
            "    time.sleep(2)  # work goes on: the Ctrl-C must stop it\n"
            "indexing.out.print = say_then_collect\n")
    result = ingest_after(code, tmp_path, docs)
    assert "Exception ignored" not in result.stderr
    assert "1 added" in result.stdout and result.returncode == 130, result.stderr
    assert result.stderr.strip() == "interrupted"


def test_a_ctrl_c_while_the_process_shuts_down_is_not_a_traceback(tmp_path, docs):
    # The ingest was done and committed; a Ctrl-C in the interpreter's shutdown (joining threads, atexit)
    # printed "Exception ignored ... KeyboardInterrupt" with a traceback (found by the crash suite).
    code = ("import atexit, os, signal, time\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(2)))\n")
    result = ingest_after(code, tmp_path, docs)
    assert "1 added" in result.stdout and result.returncode == 130, result.stderr
    assert result.stderr.strip() == "interrupted while exiting; the command had finished"


def test_ask_with_a_reader_prints_the_pickers_sentence_first_then_the_answer(tmp_path, fake):
    """`funnel ask` with `[llm] mode = "reader"` (an OpenAI-compatible server on loopback): the picker's
    sentence is printed at once as "From the page", then the model's checked answer, cited."""
    from api_support import FakeOpenAI

    llm = FakeOpenAI(fake)
    llm.deltas = ["Jane Roe ", "leads Acme [1]."]
    d = tmp_path / "docs"
    d.mkdir()
    (d / "acme.txt").write_text("The CEO of Acme is Jane Roe. Acme makes anvils.\n")
    assert funnel("ingest", str(d), "--no-calibrate", cwd=tmp_path).returncode == 0
    env = {"FUNNEL_LLM__BACKEND": f"openai:{llm.url}", "FUNNEL_LLM__MODE": "reader"}
    result = funnel("ask", "Who is the CEO of Acme?", cwd=tmp_path, env=env)
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    quoted = result.stdout.index("From the page: “The CEO of Acme is Jane Roe.”")
    assert quoted < result.stdout.index("Jane Roe leads Acme [1].")
    assert "acme.txt" in result.stdout.splitlines()[1]
    shown = json.loads(funnel("ask", "Who is the CEO of Acme?", "--json", cwd=tmp_path, env=env).stdout)
    assert shown["answer"] == "Jane Roe leads Acme [1]." and shown["quote"][0]["text"] == "The CEO of Acme is Jane Roe."
