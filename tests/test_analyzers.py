"""BM25 analyzers per language (funnel.analyze): what each makes of a text, how an index settles on one,
and the indexes made before analyzers were recorded. The stores' side is in tests/test_store_contract.py."""

import json
import logging

import numpy as np
import pytest

from funnel import analyze
from funnel.analyze import korean
from funnel.embed import HashingEmbedder
from funnel.errors import ConfigError
from funnel.index.lance import STATE_FILE, LanceStore

from helpers import chunk

EMB = HashingEmbedder(dim=32)
ENGLISH = [
    "The UserService raised a NullPointerException at line 42.",
    "Café au lait, naïve résumé; Straße über alles — 1,000 km/h!",
    "Привет, мир. Ελληνικά κείμενα. עברית. ภาษาไทย ไม่มีช่องว่าง",
]


@pytest.mark.parametrize("name", ["english", "cjk", "korean"])
def test_text_without_hangul_or_cjk_is_analyzed_as_today_by_every_analyzer(name):
    # So an English (or Cyrillic, Thai, ...) index is the same whichever analyzer built it.
    for text in ENGLISH:
        assert analyze.get(name).lex(text) == analyze.lexical_text(text)


def test_cjk_runs_become_character_bigrams():
    lex = analyze.get("cjk").lex("서울에서 東京大学 で 会議 X")
    assert lex.split() == ["서울", "울에", "에서", "東京", "京大", "大学", "で", "会議", "X"]


def test_kiwi_splits_particles_and_endings_from_the_stem():
    terms = analyze.get("korean").lex("서울에서 열린 회의는 끝났다").split()
    assert {"서울", "회의", "열리", "끝나"} <= set(terms)
    assert "서울에서" not in terms and "회의는" not in terms


def test_korean_text_around_latin_words_keeps_both():
    terms = analyze.get("korean").lex("funnel의 BM25 분석기는 UserService를 찾는다").split()
    assert {"funnel", "BM25", "분석기", "UserService", "User", "Service", "찾"} <= set(terms)


def test_a_new_index_gets_korean_with_kiwi_and_an_old_one_keeps_its_own():
    assert analyze.settle(None, None, "idx") == "korean"
    assert analyze.settle("auto", "english", "idx") == "english"
    assert analyze.settle("cjk", None, "idx") == "cjk"
    with pytest.raises(ConfigError, match="unknown analyzer 'klingon'; valid: auto, english, cjk, korean"):
        analyze.settle("klingon", None, "idx")


def test_without_kiwi_korean_falls_back_to_bigrams_with_one_line(monkeypatch, caplog):
    monkeypatch.setattr(korean, "_problem", "Kiwi is not installed (pip install 'funnel[korean]')")
    with caplog.at_level(logging.WARNING):
        assert analyze.settle("korean", None, "idx") == "cjk"
    assert analyze.settle(None, None, "idx") == "cjk"
    assert any("Kiwi is not installed" in r.getMessage() and "\n" not in r.getMessage() for r in caplog.records)


def test_kiwi_failing_to_load_gives_bigrams_and_one_line(monkeypatch, caplog):
    monkeypatch.setattr(korean, "_kiwi", None)
    monkeypatch.setattr(korean, "_problem", "Kiwi failed to load (RuntimeError: bad model file)")
    monkeypatch.setattr(korean, "_told", False)
    with caplog.at_level(logging.WARNING):
        assert analyze.get("korean").lex("서울에서 열린 회의").split() == analyze.get("cjk").lex("서울에서 열린 회의").split()
        analyze.get("korean").lex("부산에서")
    said = [r.getMessage() for r in caplog.records if "Kiwi failed to load" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0]


def test_an_index_made_before_analyzers_opens_and_searches_as_before(tmp_path):
    store = LanceStore(tmp_path / "old")
    docs = [chunk("k", 0, "서울에서 열린 회의"), chunk("e", 0, "the meeting in Seoul")]
    with store.transaction(EMB.name, EMB.dim, "english") as tx:
        tx.add(docs, np.asarray(EMB.embed([d.text for d in docs])))
    state_file = tmp_path / "old" / STATE_FILE
    state = json.loads(state_file.read_text())
    del state["analyzer"]  # as an index written before this change
    state_file.write_text(json.dumps(state))
    reopened = LanceStore(tmp_path / "old")
    assert reopened.info().analyzer == "english"
    assert reopened.search_lexical("meeting", 1)[0].chunk.doc_id == "e"
    assert reopened.search_lexical("서울에서", 1)[0].chunk.doc_id == "k"
    from funnel.pipeline import Pipeline

    notes = Pipeline.build(store=reopened, embedder=EMB, reranker=None).search("서울 회의").notes
    assert any("ingest into a new index to re-analyze" in n for n in notes)
    assert not Pipeline.build(store=reopened, embedder=EMB, reranker=None).search("meeting").notes


def test_settings_refuse_an_unknown_analyzer_in_one_line():
    from funnel.apps.settings import load_settings

    assert load_settings(analyzer="cjk").ingest.analyzer == "cjk"
    with pytest.raises(ConfigError, match="analyzer must be one of auto, english, cjk, korean, got 'bigram'"):
        load_settings(analyzer="bigram")


def test_the_language_model_is_let_go_before_calibration_and_loaded_again_when_needed(tmp_path):
    """py3langid's model (~80 MB resident) serves ingest only: `Pipeline.calibrate` releases it, and the next
    document to detect loads it again."""
    from funnel.analyze import detect
    from funnel.pipeline import Pipeline

    assert detect.language("The committee meets every second Tuesday to review the fund's holdings.") == "en"
    assert detect._identifier is not None
    p = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(), reranker=None)
    (tmp_path / "notes.txt").write_text("The committee meets every second Tuesday. It reviews the holdings.\n")
    p.indexer.ingest_paths([tmp_path / "notes.txt"])
    assert detect._identifier is not None
    p.calibrate()  # too small to measure, which it says; the model is let go all the same
    assert detect._identifier is None
    assert detect.language("Der Ausschuss tagt an jedem zweiten Dienstag im Monat.") == "de"
    assert detect._identifier is not None


def test_an_index_without_hangul_asks_no_kiwi_for_a_korean_question_and_finds_the_same(tmp_path, monkeypatch):
    """Kiwi costs ~500 MB: an index that records holding no Hangul, Han or Kana analyzes a question's CJK words
    as bigrams (they match nothing there either way); one that holds Korean, or was made before the record,
    keeps Kiwi."""
    from funnel.generate.abstain import _content_terms
    from funnel.pipeline import Pipeline

    store = LanceStore(tmp_path / "en")
    p = Pipeline.build(store=store, embedder=HashingEmbedder(), reranker=None)
    (tmp_path / "docker.txt").write_text("Docker keeps container logs under /var/lib/docker/containers.\n")
    p.indexer.ingest_paths([tmp_path / "docker.txt"])
    state = json.loads((tmp_path / "en" / STATE_FILE).read_text())
    assert state["analyzer"] == "korean" and state["cjk"] is False
    question = "Docker의 로그는 어디에 저장되나요?"  # Kiwi splits Docker의 -> Docker 의; so must the stand-in
    with_kiwi = [s.chunk.chunk_id for s in store.search_lexical(question, 5)]  # before Kiwi is barred below
    kiwi_terms = _content_terms(question)
    calls = []
    monkeypatch.setattr(korean, "_kiwi_or_none", lambda: calls.append(1))
    assert [s.chunk.chunk_id for s in store.search_lexical(question, 5)] == with_kiwi != []
    step = p.ask_step(question)
    assert step.evidence is not None and calls == []
    # The gate counts about as many words as Kiwi's morphemes (docker 로그 저장 against docker 로그는 어디에
    # 저장되나요), all of them but docker absent from this index either way.
    assert abs(step.evidence.terms - len(kiwi_terms)) <= 1 and step.evidence.absent > 0.5
    # Korean text joins: from then on the question is analyzed as the index is, by Kiwi.
    (tmp_path / "ko.txt").write_text("도커 로그는 컨테이너 폴더에 저장됩니다.\n")
    p.indexer.ingest_paths([tmp_path / "ko.txt"])
    assert json.loads((tmp_path / "en" / STATE_FILE).read_text())["cjk"] is True
    store.search_lexical(question, 5)
    assert calls, "an index holding Korean analyzes a Korean question with Kiwi"
    # An index made before the record says nothing, so Kiwi stays.
    old = json.loads((tmp_path / "en" / STATE_FILE).read_text())
    old.pop("cjk")
    (tmp_path / "en" / STATE_FILE).write_text(json.dumps(old))
    assert LanceStore(tmp_path / "en").query_analyzer().name == "korean"
