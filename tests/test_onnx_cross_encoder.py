"""The ONNX cross-encoder: the builder against a numpy forward pass, the reranker's encoding and
truncation on a tiny random model, and the committed built-in model (when present) on real text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bert_reference import dense, encode, random_layer_weights

from funnel.errors import BackendUnavailable, ConfigError
from funnel.rerank.base import Reranker
from funnel.types import Candidate, Chunk

onnx_build = pytest.importorskip("funnel.onnx.build")
pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir  # noqa: E402

# Sizes unlike MiniLM's, so the builder must read them from config.json.
_TINY = {"hidden_size": 24, "num_attention_heads": 3, "num_hidden_layers": 2, "intermediate_size": 40}
_POSITIONS = 64
_EPS = 1e-5
_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
_VOCAB = {tok: i for i, tok in enumerate(_SPECIALS + [f"w{i}" for i in range(46)])}


def _tiny_checkpoint(src: Path) -> dict[str, np.ndarray]:
    """A BertForSequenceClassification-shaped checkpoint (num_labels=1), written with numpy only."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from tokenizers.processors import TemplateProcessing

    rng = np.random.default_rng(1)
    h, inter, vocab = _TINY["hidden_size"], _TINY["intermediate_size"], len(_VOCAB)

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.3, shape).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": rand(vocab, h),
        "embeddings.position_embeddings.weight": rand(_POSITIONS, h),
        "embeddings.token_type_embeddings.weight": rand(2, h) * 3,  # large: a type mix-up must show
        "embeddings.LayerNorm.weight": 1 + rand(h),
        "embeddings.LayerNorm.bias": rand(h),
        "pooler.dense.weight": rand(h, h),
        "pooler.dense.bias": rand(h),
    }
    w.update(random_layer_weights(rand, _TINY["num_hidden_layers"], h, inter))
    head = {"classifier.weight": rand(1, h), "classifier.bias": rand(1)}

    src.mkdir()
    save_file({**{f"bert.{k}": v for k, v in w.items()}, **head}, str(src / "model.safetensors"))
    config = {
        **_TINY,
        "layer_norm_eps": _EPS,
        "max_position_embeddings": _POSITIONS,
        "hidden_act": "gelu",
        "architectures": ["BertForSequenceClassification"],
        "num_labels": 1,
    }
    (src / "config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer(WordLevel(_VOCAB, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", _VOCAB["[CLS]"]), ("[SEP]", _VOCAB["[SEP]"])],
    )
    tokenizer.save(str(src / "tokenizer.json"))
    return {**w, **head}


def _numpy_logits(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    """BertForSequenceClassification's forward pass: encoder, pooler on [CLS], classifier."""
    x = encode(w, ids, mask, types, _TINY["num_attention_heads"], _TINY["num_hidden_layers"], _EPS)
    pooled = np.tanh(dense(w, x[:, 0], "pooler.dense"))
    return dense(w, pooled, "classifier")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("tiny-cross-encoder")
    weights = _tiny_checkpoint(root / "src")
    out = onnx_build.build_cross_encoder(root / "src", root / "onnx", name="tiny-ce", max_length=32)
    return out, weights


def _source_hash(model_dir: Path) -> str:
    return json.loads((model_dir / "funnel_model.json").read_text())["source_sha256"]


def _candidates(texts: list[str]) -> list[Candidate]:
    return [
        Candidate(
            Chunk(chunk_id=f"c{i}", doc_id=f"d{i}", ordinal=0, text=t, path=f"d{i}", title="", kind="text",
                  n_tokens=len(t.split())),
            fused_rank=i + 1,
            fused_score=1.0 / (61 + i),
        )
        for i, t in enumerate(texts)
    ]


def _words(start: int, n: int) -> str:
    return " ".join(f"w{(start + i) % 46}" for i in range(n))


def test_build_layout_and_meta(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    meta = json.loads((out / "funnel_model.json").read_text())
    assert meta["head"] == "sequence_classification"
    assert (meta["name"], meta["max_length"], meta["num_labels"]) == ("tiny-ce", 32, 1)
    for name in ("model.onnx", "model_int8.onnx", "tokenizer.json"):
        assert (out / name).stat().st_size > 0


def test_onnx_logits_match_numpy_forward(tiny: tuple[Path, dict]) -> None:
    import onnxruntime as ort

    out, weights = tiny
    rng = np.random.default_rng(7)
    ids = rng.integers(4, len(_VOCAB), size=(3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 8:] = 0  # padded rows
    mask[2, 5:] = 0
    types = np.zeros_like(ids)
    types[:, 6:] = 1
    types[2, 4:] = 1
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    (logits,) = session.run(None, feeds)
    assert logits.shape == (3, 1) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, _numpy_logits(weights, ids, mask, types), atol=1e-4)
    # Token types matter: the same ids as one segment give other logits.
    (single,) = session.run(None, {**feeds, "token_type_ids": np.zeros_like(ids)})
    assert np.max(np.abs(single - logits)) > 1e-2
    # The int8 copy follows fp32 (weights quantised per channel).
    int8 = ort.InferenceSession(str(out / "model_int8.onnx"), providers=["CPUExecutionProvider"])
    for row in range(3):
        one = {k: v[row : row + 1, : int(mask[row].sum())] for k, v in feeds.items()}
        (q,) = int8.run(None, one)
        assert abs(float(q[0, 0]) - float(logits[row, 0])) < 0.1


def test_reranker_scores_match_reference(tiny: tuple[Path, dict]) -> None:
    out, weights = tiny
    reranker = OnnxCrossEncoder(out, quantized=False, max_length=32, batch_size=2, threads=1)
    assert isinstance(reranker, Reranker)
    assert reranker.name == f"tiny-ce.{_source_hash(out)[:8]}"  # the weights' fingerprint: see below
    query, texts = "w1 w2 w3", ["w4 w5", _words(10, 12), "w9", "w20 w21 w22 w23"]
    result = reranker.rerank(query, _candidates(texts))
    assert result.truncated == ()
    for text, raw, score in zip(texts, result.raw_scores, result.scores, strict=True):
        q, p = [_VOCAB[t] for t in query.split()], [_VOCAB[t] for t in text.split()]
        ids = np.array([[_VOCAB["[CLS]"], *q, _VOCAB["[SEP]"], *p, _VOCAB["[SEP]"]]])
        types = np.array([[0] * (len(q) + 2) + [1] * (len(p) + 1)])
        expected = float(_numpy_logits(weights, ids, np.ones_like(ids), types)[0, 0])
        assert raw == pytest.approx(expected, abs=1e-4)
        assert 0.0 < score < 1.0
        assert score == pytest.approx(1 / (1 + np.exp(-raw)), abs=1e-9)


def test_batched_equals_one_by_one(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    texts = [_words(i, 3 + 4 * i) for i in range(5)]
    for quantized in (False, True):
        reranker = OnnxCrossEncoder(out, quantized=quantized, max_length=32, batch_size=4, threads=1)
        together = reranker.rerank("w1 w2", _candidates(texts)).raw_scores
        alone = [reranker.rerank("w1 w2", _candidates([t])).raw_scores[0] for t in texts]
        np.testing.assert_allclose(together, alone, atol=1e-5)


def test_truncation_keeps_query_whole(tiny: tuple[Path, dict]) -> None:
    out, weights = tiny
    reranker = OnnxCrossEncoder(out, quantized=False, max_length=16, threads=1)
    query = _words(0, 5)  # 5 tokens + 3 specials: 8 left for the passage
    long_text, fits, exact = _words(10, 30), _words(10, 4), _words(10, 8)
    result = reranker.rerank(query, _candidates([fits, long_text, exact, long_text]))
    assert result.truncated == (1, 3)
    # What the model saw of the long passage is exactly its first 8 tokens, after the whole query.
    cut = reranker.rerank(query, _candidates([_words(10, 8)]))
    assert result.raw_scores[1] == pytest.approx(cut.raw_scores[0], abs=1e-6)
    assert result.raw_scores[2] == pytest.approx(cut.raw_scores[0], abs=1e-6)
    encoding = reranker._tokenizer.encode(query, long_text)
    assert len(encoding.ids) == 16
    assert encoding.tokens[1:6] == query.split()


def test_query_longer_than_window_is_cut_to_half(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    reranker = OnnxCrossEncoder(out, quantized=False, max_length=16, threads=1)
    long_query = _words(0, 40)
    result = reranker.rerank(long_query, _candidates(["w5 w6", "w7"]))
    assert result.truncated == (0, 1)  # every pair lost part of its query
    half = reranker.rerank(_words(0, 6), _candidates(["w5 w6", "w7"]))  # (16 - 3) // 2 = 6 query tokens
    np.testing.assert_allclose(result.raw_scores, half.raw_scores, atol=1e-6)
    assert all(0.0 < s < 1.0 for s in result.scores)


def test_empty_candidates(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    result = OnnxCrossEncoder(out, max_length=32, threads=1).rerank("w1", [])
    assert (result.scores, result.raw_scores, result.truncated) == ((), (), ())


def test_constructor_is_cheap_and_checks_files(tiny: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = tiny
    reranker = OnnxCrossEncoder(out, max_length=32)
    assert reranker._session is None  # nothing loaded until warm_up or first use
    reranker.warm_up()
    assert reranker._session is not None
    with pytest.raises(BackendUnavailable, match="funnel_model.json"):
        OnnxCrossEncoder(tmp_path / "nowhere")
    meta = json.loads((out / "funnel_model.json").read_text())
    (tmp_path / "funnel_model.json").write_text(json.dumps(meta))
    with pytest.raises(BackendUnavailable, match="model_int8.onnx"):
        OnnxCrossEncoder(tmp_path)
    (tmp_path / "funnel_model.json").write_text(json.dumps({**meta, "head": None, "pooling": "mean"}))
    with pytest.raises(BackendUnavailable, match="not a cross-encoder"):
        OnnxCrossEncoder(tmp_path)


def test_embedder_checkpoint_is_not_a_cross_encoder(tmp_path: Path, tiny: tuple[Path, dict]) -> None:
    from safetensors.numpy import load_file, save_file

    src = tmp_path / "headless"
    src.mkdir()
    raw = load_file(str(tiny[0].parent / "src" / "model.safetensors"))
    save_file({k: v for k, v in raw.items() if not k.startswith("classifier")}, str(src / "model.safetensors"))
    (src / "config.json").write_text((tiny[0].parent / "src" / "config.json").read_text())
    with pytest.raises(ConfigError, match="classifier"):
        onnx_build.build_cross_encoder(src, tmp_path / "out", max_length=32)


def test_builtin_model_dir_missing_is_backend_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="make reranker.*models.reranker_dir"):
        builtin_model_dir(tmp_path / "none")


# --------------------------------------------------------------------------------------------------
# The committed built-in model


@pytest.fixture(scope="module")
def builtin() -> OnnxCrossEncoder:
    try:
        model_dir = builtin_model_dir()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    reranker = OnnxCrossEncoder(model_dir, threads=1)
    reranker.warm_up()
    return reranker


@pytest.mark.model
def test_builtin_ranks_relevant_first(builtin: OnnxCrossEncoder) -> None:
    query = "What was the total revenue in 2019?"
    texts = [
        "Annual report\nThe company operates three bakeries in northern Italy and employs 120 people.",
        "Annual report\nYear: 2019 | Total revenue: $1,496.5 million | Net income: $120.3 million",
        "Recipes\nMix the flour with water and let the dough rest overnight before baking.",
    ]
    result = builtin.rerank(query, _candidates(texts))
    assert max(range(3), key=lambda i: result.scores[i]) == 1
    assert all(0.0 <= s <= 1.0 for s in result.scores)
    assert result.raw_scores is not None and len(result.raw_scores) == 3


@pytest.mark.model
def test_builtin_prefers_relevant_abstract(builtin: OnnxCrossEncoder) -> None:
    query = "Vitamin D deficiency increases the risk of multiple sclerosis."
    relevant = (
        "Vitamin D and multiple sclerosis\nLow serum 25-hydroxyvitamin D levels were associated with a "
        "higher risk of developing multiple sclerosis in a prospective cohort of 7 million US military personnel."
    )
    irrelevant = (
        "Graphene transistors\nWe report the fabrication of graphene field-effect transistors with "
        "record carrier mobility at room temperature."
    )
    scores = builtin.rerank(query, _candidates([irrelevant, relevant])).scores
    assert scores[1] > scores[0]


def test_a_window_other_than_the_model_own_is_part_of_the_name(tiny: tuple[Path, dict]) -> None:
    # A score depends on the window, so the rerank cache and a stored calibration must tell them apart.
    out, _ = tiny
    own = OnnxCrossEncoder(out, quantized=False, threads=1)
    fingerprint = _source_hash(out)[:8]
    assert (own.name, own.max_length) == (f"tiny-ce.{fingerprint}", 32)  # max_length from funnel_model.json
    shorter = OnnxCrossEncoder(out, quantized=False, max_length=16, threads=1)
    assert shorter.name == f"tiny-ce.{fingerprint}@16"
    long_text = _words(10, 30)
    assert own.rerank("w1", _candidates([long_text])).raw_scores != shorter.rerank("w1", _candidates([long_text])).raw_scores


def test_two_builds_of_one_model_name_never_share_a_calibration(tiny: tuple[Path, dict], tmp_path: Path) -> None:
    # Every train_reranker.py build is "funnel-reranker-minilm": the weights' fingerprint in the name is what
    # keeps a calibration (or a cached score) made with one build from being used with another.
    import shutil

    from funnel.calibrate import Calibration
    from funnel.rerank.policies import RerankPolicy

    out, _ = tiny
    retrained = shutil.copytree(out, tmp_path / "retrained")
    meta = json.loads((retrained / "funnel_model.json").read_text())
    meta["source_sha256"] = "f" * 64  # another checkpoint converted under the same name
    (retrained / "funnel_model.json").write_text(json.dumps(meta))
    first = OnnxCrossEncoder(out, quantized=False, threads=1)
    second = OnnxCrossEncoder(retrained, quantized=False, threads=1)
    assert first.name != second.name and second.name == "tiny-ce.ffffffff"
    calibration = Calibration(RerankPolicy.RRF, 0.5, "measured", reranker=first.name, embedder="e",
                              index_version=1, index_chunks=10)
    assert calibration.mismatch(first.name, "e") is None
    assert calibration.mismatch(second.name, "e") == f"calibrated with reranker {first.name}, not {second.name}"

    # A model directory from elsewhere, with no recorded source hash: the model file's own bytes decide.
    del meta["source_sha256"]
    (retrained / "funnel_model.json").write_text(json.dumps(meta))
    unrecorded = OnnxCrossEncoder(retrained, quantized=False, threads=1).name
    assert unrecorded.startswith("tiny-ce.") and unrecorded not in (first.name, second.name)
    with open(retrained / "model.onnx", "ab") as fh:
        fh.write(b"\0")  # other bytes: another model, as far as anyone can tell
    assert OnnxCrossEncoder(retrained, quantized=False, threads=1).name != unrecorded
