"""One engine config, one builder: every way in builds the same engine from defaults written once, and the
settings are sections generated from the config dataclasses (issue 30).

The first three tests are the drifts a review found on c9a8624, each failing there: `funnel serve`'s
collections ignored the ingest limits, triage ignored `k` and `candidates`, and the LangChain/LlamaIndex
second stage scored every item whatever `rerank_depth` said."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
from helpers import ScriptedReranker
from typer.testing import CliRunner

from funnel.apps import settings as settings_module
from funnel.apps.settings import SECTION_MODELS, SECTIONS, Settings, load_settings, section_key
from funnel.engine_config import EngineConfig
from funnel.errors import ConfigError
from funnel.pipeline import Pipeline

TRACE = """Traceback (most recent call last):
  File "app/user_service.py", line 12, in get_user
    raise UserNotFound(user_id)
app.errors.UserNotFound: user 42 not found
"""


def test_serve_collections_take_the_ingest_limits(tmp_path):
    from funnel.apps.api import create_app

    settings = load_settings(embedder="hashing", reranker="none", max_file_mb=0.001,
                             data_dir=tmp_path / "data")
    app = create_app(settings)
    try:
        big = tmp_path / "notes.txt"
        big.write_text("harbour pilots board ships at the outer buoy. " * 100)  # 4.7 KB, over 1 KB
        report = app.state.library.create("c").pipeline.ingest([big])
    finally:
        app.state.library.close()
    assert report.added == 0
    assert any("max_file_mb" in p.reason for p in report.problems), report.problems


def test_triage_follows_search_k_and_candidates(tmp_path):
    from funnel.apps.triage.locate import FileLocator
    from funnel.apps.triage.stacktrace import parse_trace
    from funnel.embed import HashingEmbedder
    from funnel.index.lance import LanceStore
    from test_triage import SAMPLE_REPO

    windows = []

    class Recording(Pipeline):
        def first_stage(self, request, retrieved=None):
            windows.append(request.candidates)
            return super().first_stage(request, retrieved)

    pipeline = Recording.build(EngineConfig.of(k=2, candidates=7), store=LanceStore(tmp_path / "index"),
                               embedder=HashingEmbedder(), reranker=None)
    pipeline.ingest([SAMPLE_REPO])
    found = FileLocator(pipeline, repo_root=SAMPLE_REPO).locate(parse_trace(TRACE), TRACE)
    assert windows == [7]
    assert len(found.documents) == 2


def test_the_adapters_second_stage_scores_only_the_rerank_depth():
    from funnel.integrations._core import SecondStage

    class Counting(ScriptedReranker):
        seen: list[int] = []

        def rerank(self, query, candidates):
            Counting.seen.append(len(candidates))
            return super().rerank(query, candidates)

    texts = [f"passage {i}" for i in range(6)]
    reranker = Counting({f"#{i}": float(i) for i in range(6)})
    stage = SecondStage.from_names(reranker, "replace", rerank_depth=2)
    out = stage.rerank("q", texts)
    assert Counting.seen == [2]
    assert [r.position for r in out] == [1, 0, 2, 3, 4, 5]  # the two scored, reordered; the rest below


def test_every_way_in_builds_the_same_engine(tmp_path):
    import funnel

    opened = funnel.open(tmp_path / "idx", embedder="hashing", reranker="none", k=3, policy="rrf",
                         rerank_depth=9)
    from_settings = load_settings(index=str(tmp_path / "idx"), embedder="hashing", reranker="none", k=3,
                                  policy="rrf", rerank_depth=9).engine()
    assert opened.config == from_settings
    assert opened.config.grouping.k == 3 and opened.config.rerank.depth == 9 and opened.reranker is None


def test_every_setting_takes_its_default_and_range_from_its_dataclass():
    for section, classes in SECTIONS.items():
        model = SECTION_MODELS[section].model_fields
        for dc in classes:
            for f in fields(dc):
                if f.name in ("first_stage",):
                    continue
                key = section_key(section, f.name)
                default = f.default_factory() if f.default is MISSING else f.default
                made = model[key].default_factory
                built = model[key].default if made is None else made()
                assert built == default, (section, key)
                assert model[key].description == f.metadata["description"], (section, key)
    assert Settings().engine() == EngineConfig()


def test_sections_from_toml_and_environment_and_flags_in_that_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    toml = '[search]\nk = 7\ncandidates = 30\n[rerank]\ndepth = 9\npolicy = "rrf"\n'
    (tmp_path / "funnel.toml").write_text(toml)
    monkeypatch.setenv("FUNNEL_SEARCH__CANDIDATES", "40")
    monkeypatch.setenv("FUNNEL_LLM__BACKEND", "none")
    s = load_settings(k=4)
    assert (s.search.k, s.search.candidates, s.rerank.depth, s.rerank.policy.value) == (4, 40, 9, "rrf")
    engine = s.engine()
    assert (engine.grouping.k, engine.grouping.candidates, engine.rerank.depth) == (4, 40, 9)


def test_deprecated_flat_names_work_and_say_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(settings_module, "_SAID", set())
    (tmp_path / "funnel.toml").write_text('k = 6\nreranker = "none"\n')
    monkeypatch.setenv("FUNNEL_DATABASE", "postgresql://db.internal/funnel")
    monkeypatch.setenv("FUNNEL_LLM", "none")
    for _ in range(2):
        s = load_settings()
    assert (s.search.k, s.rerank.backend, s.llm.backend) == (6, "none", "none")
    assert s.database.url.get_secret_value() == "postgresql://db.internal/funnel"
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 4, notes  # k, reranker, database, llm: once each, however often settings load
    said = next(n for n in notes if "'k'" in n)
    assert "setting 'k' (in funnel.toml) is deprecated: use [search] k in funnel.toml, " \
           "FUNNEL_SEARCH__K" in said


@pytest.mark.parametrize("toml, message", [
    ("[serch]\nk = 3\n", "unknown setting serch; did you mean search?"),
    ("[search]\nkk = 3\n", "unknown setting search.kk; did you mean search.k?"),
    ("[rerank]\nweigth = 0.5\n", "unknown setting rerank.weigth; did you mean rerank.weight?"),
    ("rerank_dept = 3\n", "unknown setting rerank_dept; did you mean rerank.depth?"),
    ("[search]\nk = 0\n", "invalid setting search.k: must be between 1 and 1000, got 0"),
    ("[rerank]\ntimeout_s = 0\n", "invalid setting rerank.timeout_s: must be more than 0, got 0"),
    ('[database]\nurl = "mysql://x/y"\n', "invalid setting database.url: must be a postgresql:// URL"),
])
def test_a_bad_funnel_toml_is_one_line_naming_the_nearest_valid_name_or_the_range(tmp_path, monkeypatch, toml,
                                                                                  message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "funnel.toml").write_text(toml)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == message


def test_funnel_config_prints_each_value_and_where_it_came_from(tmp_path, monkeypatch):
    from funnel.apps.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "funnel.toml").write_text("[search]\nk = 7\n")
    monkeypatch.setenv("FUNNEL_RERANK__DEPTH", "9")
    monkeypatch.setenv("FUNNEL_SERVE__API_KEY", "a-secret-key")
    result = CliRunner().invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    import json

    rows = {r["setting"]: (r["value"], r["source"]) for r in json.loads(result.stdout)}
    assert rows["search.k"] == (7, "funnel.toml")
    assert rows["rerank.depth"] == (9, "environment FUNNEL_RERANK__DEPTH")
    assert rows["serve.api_key"] == ("********", "environment FUNNEL_SERVE__API_KEY")
    assert rows["search.candidates"] == (25, "default")
    assert "a-secret-key" not in result.stdout


def test_a_config_out_of_range_is_one_line_with_the_range():
    with pytest.raises(ConfigError, match="k must be between 1 and 1000, got 0"):
        EngineConfig.of(k=0)
    with pytest.raises(ConfigError, match="unknown search setting 'kk'"):
        EngineConfig.of(kk=3)


# --- issue 41: each limit written once, one flat-name table, the environment read by the settings alone ------


def test_k_candidates_and_depth_have_one_range_each_and_every_surface_reads_it():
    from pydantic import TypeAdapter

    from funnel.apps.api.schemas import AskRequest, SearchRequest
    from funnel.apps.cli.common import KOpt
    from funnel.config import bounds, request_bounds
    from funnel.engine_config import GroupingConfig, RerankConfig

    assert bounds(GroupingConfig, "k") == bounds(GroupingConfig, "candidates") == {"ge": 1, "le": 1000}
    assert bounds(RerankConfig, "depth") == {"ge": 1, "le": 1000}
    request = request_bounds(GroupingConfig, "k")
    assert request == {"ge": 1, "le": 100}  # a request over the network: the server bounds its cost
    for model in (SearchRequest, AskRequest):
        k = model.model_json_schema()["properties"]["k"]["anyOf"][0]
        assert (k["minimum"], k["maximum"]) == (request["ge"], request["le"])
    mcp = pytest.importorskip("funnel.integrations.mcp")
    k = TypeAdapter(mcp.KArg).json_schema()["anyOf"][0]
    assert (k["minimum"], k["maximum"]) == (request["ge"], request["le"])
    assert "between 1 and 1000" in KOpt.__metadata__[0].help  # the CLI's k is the setting's, checked there
    with pytest.raises(ConfigError, match="invalid setting search.k: must be between 1 and 1000, got 1001"):
        load_settings(k=1001)
    with pytest.raises(ConfigError, match="depth must be between 1 and 1000, got 0"):
        EngineConfig.of(rerank_depth=0)


def test_the_flat_names_are_generated_one_per_key_and_keep_the_earlier_releases_names():
    from funnel.apps.settings import FLAT_NAMES, valid_names
    from funnel.engine_config import FLAT_NAMES as ENGINE_FLAT_NAMES

    earlier = {"k": "search.k", "rrf_k": "search.rrf_k", "reranker": "rerank.backend", "policy": "rerank.policy",
               "guaranteed": "rerank.guaranteed", "rerank_weight": "rerank.weight", "rerank_depth": "rerank.depth",
               "rerank_model": "rerank.model", "llm": "llm.backend", "llm_model": "llm.model",
               "max_tokens": "ingest.chunk_tokens", "data_dir": "serve.data_dir", "api_key": "serve.api_key",
               "repo": "triage.repo", "slack_retries": "slack.retries", "database": "database.url",
               "search_database": "database.search_url"}
    assert {name: FLAT_NAMES[name] for name in earlier} == earlier
    keys = [n for n in valid_names() if "." in n]
    assert sorted(FLAT_NAMES.values()) == sorted(keys)  # every key one flat name, no two keys the same one
    assert ENGINE_FLAT_NAMES.items() <= FLAT_NAMES.items()
    config = EngineConfig.of(k=3, retrieval="bm25", llm_model="m", reranker_dir="/models/rr", chunks_per_document=1)
    assert (config.grouping.k, config.first_stage.retrieval.value, config.llm.model) == (3, "bm25", "m")
    assert (str(config.models.reranker_dir), config.grouping.chunks_per_document) == ("/models/rr", 1)


def test_flags_go_to_their_sections_without_a_deprecation_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(settings_module, "_SAID", set())
    from funnel.apps.cli.common import settings_from

    s = settings_from(reranker="none", data_dir=tmp_path / "data", embedder="hashing", llm="none",
                      database="postgresql://db/funnel", k=4)
    assert (s.rerank.backend, s.serve.data_dir, s.embedder, s.llm.backend, s.search.k) == (
        "none", tmp_path / "data", "hashing", "none", 4)
    assert s.database.url.get_secret_value() == "postgresql://db/funnel"
    assert capsys.readouterr().err == ""


def test_the_model_and_eval_folders_are_settings_and_their_old_variables_say_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(settings_module, "_SAID", set())
    old = {"FUNNEL_MODEL_DIR": "minilm", "FUNNEL_E5_MODEL_DIR": "e5", "FUNNEL_RERANKER_DIR": "rr",
           "FUNNEL_EVAL_CACHE": "eval"}
    for name, folder in old.items():
        monkeypatch.setenv(name, str(tmp_path / folder))
    for _ in range(2):
        s = load_settings()
    models = s.section("models")
    assert (models.minilm_dir, models.e5_dir, models.reranker_dir, s.section("eval").cache) == tuple(
        tmp_path / folder for folder in old.values())
    notes = capsys.readouterr().err.strip().splitlines()
    assert len(notes) == 4, notes
    assert any("setting 'model_dir' (in the environment) is deprecated: use [models] minilm_dir in "
               "funnel.toml, FUNNEL_MODELS__MINILM_DIR in the environment" in n for n in notes), notes
    for name in old:
        monkeypatch.delenv(name)
    monkeypatch.setenv("FUNNEL_MODELS__RERANKER_DIR", str(tmp_path / "none"))
    s = load_settings()
    assert capsys.readouterr().err == ""
    from funnel.apps.factory import reranker_from_settings
    from funnel.embed import HashingEmbedder
    from funnel.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match=f"no funnel_model.json in {tmp_path / 'none'}"):
        reranker_from_settings(s)  # the setting reaches the loader as a parameter
    with pytest.raises(BackendUnavailable, match=f"no funnel_model.json in {tmp_path / 'none'}"):
        Pipeline.build(s.engine(), embedder=HashingEmbedder())
