"""The torch-free ONNX embedder, on the packaged all-MiniLM-L6-v2 (built once per session, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bert_reference import encode, random_layer_weights

from funnel.embed.base import Embedder
from funnel.errors import BackendUnavailable

onnx_build = pytest.importorskip("funnel.onnx.build")
pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
from funnel.embed.onnx import OnnxEmbedder, default_model_dir  # noqa: E402

pytestmark = pytest.mark.model

# Words that are each one WordPiece token, so a prefix of N words is exactly N tokens.
_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "people", "watch")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        source = onnx_build.packaged_minilm_dir()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    return onnx_build.build(source, tmp_path_factory.mktemp("onnx-minilm"), name=onnx_build.PACKAGED_NAME)


@pytest.fixture(scope="session", params=[True, False], ids=["int8", "fp32"])
def embedder(request: pytest.FixtureRequest, model_dir: Path) -> OnnxEmbedder:
    emb = OnnxEmbedder(model_dir, quantized=request.param, threads=1, batch_size=4)
    emb.warm_up()
    return emb


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_build_output_layout(model_dir: Path) -> None:
    meta = json.loads((model_dir / "funnel_model.json").read_text())
    assert meta["name"] == "all-MiniLM-L6-v2"
    assert (meta["dim"], meta["max_seq_length"], meta["pooling"]) == (384, 256, "mean")
    assert len(meta["source_sha256"]) == 64
    for name in ("model.onnx", "model_int8.onnx", "tokenizer.json"):
        assert (model_dir / name).stat().st_size > 0


def test_build_is_deterministic(model_dir: Path, tmp_path: Path) -> None:
    again = onnx_build.build(onnx_build.packaged_minilm_dir(), tmp_path, name=onnx_build.PACKAGED_NAME)
    for name in ("model.onnx", "model_int8.onnx", "tokenizer.json", "funnel_model.json"):
        assert (again / name).read_bytes() == (model_dir / name).read_bytes(), name


def test_protocol_and_attributes(embedder: OnnxEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384
    assert embedder.max_tokens == 254
    assert embedder.name.startswith("all-MiniLM-L6-v2")


def test_shape_dtype_norm(embedder: OnnxEmbedder) -> None:
    vectors = embedder.embed(["A man is eating food.", "Protein folding in yeast.", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_batch(embedder: OnnxEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_identical_text_identical_vector(embedder: OnnxEmbedder) -> None:
    text = "Vitamin D deficiency is associated with multiple sclerosis."
    first = embedder.embed([text, text])
    np.testing.assert_array_equal(first[0], first[1])
    np.testing.assert_array_equal(embedder.embed([text, text]), first)  # run to run, bit for bit
    # Alone vs in a batch of two, fp32 may differ in the last bits (different GEMM blocking).
    np.testing.assert_allclose(embedder.embed([text])[0], first[0], atol=1e-6)


def test_paraphrase_closer_than_unrelated(embedder: OnnxEmbedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "The cat sat on the mat.",
            "A cat was sitting on the rug.",
            "Quarterly revenue grew by twelve percent.",
        ]
    )
    assert _cos(anchor, paraphrase) > _cos(anchor, unrelated) + 0.3


@pytest.mark.parametrize(
    "text",
    [
        "Plain English sentence.",
        "Héllo wörld — naïve café's résumé, 東京! x² and unbelievably-long-hyphenated-words",
        "   leading and trailing spaces   ",
        "",
    ],
)
def test_count_tokens_matches_offsets(embedder: OnnxEmbedder, text: str) -> None:
    offsets = embedder.token_offsets(text)
    assert embedder.count_tokens(text) == len(offsets)
    assert all(0 <= start < end <= len(text) for start, end in offsets)
    assert offsets == sorted(offsets)


def test_long_text_is_truncated_to_window(embedder: OnnxEmbedder) -> None:
    words = [_WORDS[i % len(_WORDS)] for i in range(2000)]
    text = " ".join(words)
    assert embedder.count_tokens(text) == 2000  # counting never truncates
    window = " ".join(words[: embedder.max_tokens])
    long_vec, window_vec = embedder.embed([text, window])
    assert np.all(np.isfinite(long_vec))
    # What the model sees of the long text is exactly its first max_tokens tokens.
    assert _cos(long_vec, window_vec) > 0.9999


def test_batch_equals_one_by_one(embedder: OnnxEmbedder) -> None:
    texts = [
        "short",
        "A somewhat longer sentence about cells and proteins.",
        " ".join(_WORDS * 3),
        "Mitochondria are the powerhouse of the cell.",
        "x",
        " ".join(_WORDS * 30),  # past the window
        "Second to last.",
        "Insulin resistance and type 2 diabetes.",
        "The end.",
    ]
    batched = embedder.embed(texts)  # batch_size=4: several padded, length-sorted batches
    for text, row in zip(texts, batched, strict=True):
        assert _cos(row, embedder.embed([text])[0]) > 0.9999, text


def test_int8_close_to_fp32(model_dir: Path) -> None:
    texts = ["Vitamin D and multiple sclerosis.", "The cat sat on the mat.", " ".join(_WORDS * 5)]
    fp32 = OnnxEmbedder(model_dir, quantized=False, threads=1).embed(texts)
    int8 = OnnxEmbedder(model_dir, quantized=True, threads=1).embed(texts)
    assert np.min(np.sum(fp32 * int8, axis=1)) > 0.97


def test_missing_model_dir_is_backend_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="funnel_model.json"):
        OnnxEmbedder(tmp_path / "nowhere")


def test_missing_model_file_is_backend_unavailable(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "funnel_model.json").write_text((model_dir / "funnel_model.json").read_text())
    with pytest.raises(BackendUnavailable, match="model_int8.onnx"):
        OnnxEmbedder(tmp_path)


def test_default_model_dir_builds_once(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "cache" / "minilm"
    assert default_model_dir(target) == target
    built = (target / "model_int8.onnx").stat().st_mtime_ns
    assert default_model_dir(target) == target
    assert (target / "model_int8.onnx").stat().st_mtime_ns == built  # cached, not rebuilt
    assert sorted(p.name for p in target.parent.iterdir()) == ["minilm"]  # no staging dirs left behind
    vector = OnnxEmbedder(target).embed(["hello"])
    assert vector.shape == (1, 384)


# A tiny random BERT, with a sentence-transformers weight prefix and other sizes than MiniLM, checked
# against a plain numpy forward pass: the builder must read everything from config.json.
_TINY = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 48}


def _tiny_checkpoint(src: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    rng = np.random.default_rng(0)
    h, inter, vocab, positions = _TINY["hidden_size"], _TINY["intermediate_size"], 50, 16

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.2, shape).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": rand(vocab, h),
        "embeddings.position_embeddings.weight": rand(positions, h),
        "embeddings.token_type_embeddings.weight": rand(2, h),
        "embeddings.LayerNorm.weight": 1 + rand(h),
        "embeddings.LayerNorm.bias": rand(h),
    }
    w.update(random_layer_weights(rand, _TINY["num_hidden_layers"], h, inter))

    src.mkdir()
    save_file({f"0.auto_model.{k}": v for k, v in w.items()}, str(src / "model.safetensors"))
    config = {**_TINY, "layer_norm_eps": 1e-5, "max_position_embeddings": positions, "hidden_act": "gelu"}
    (src / "config.json").write_text(json.dumps(config))
    (src / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12}))
    words = {f"w{i}": i for i in range(vocab)}
    Tokenizer(WordLevel(words, unk_token="w1")).save(str(src / "tokenizer.json"))
    return w


def _numpy_reference(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' forward pass: encoder, mean pooling over the mask, L2 normalisation."""
    x = encode(w, ids, mask, np.zeros_like(ids), _TINY["num_attention_heads"], _TINY["num_hidden_layers"], 1e-5)
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_builder_is_generic_over_config_and_prefix(tmp_path: Path) -> None:
    import onnxruntime as ort

    weights = _tiny_checkpoint(tmp_path / "tiny")
    out = onnx_build.build(tmp_path / "tiny", tmp_path / "out")
    meta = json.loads((out / "funnel_model.json").read_text())
    assert (meta["name"], meta["dim"], meta["max_seq_length"]) == ("tiny", 32, 12)

    ids = np.array([[2, 7, 9, 11, 3, 5], [2, 8, 3, 0, 0, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=np.int64)
    expected = _numpy_reference(weights, ids, mask.astype(np.float64))
    for name in ("model.onnx", "model_int8.onnx"):
        session = ort.InferenceSession(str(out / name), providers=["CPUExecutionProvider"])
        (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        assert got.shape == (2, 32) and got.dtype == np.float32
        if name == "model.onnx":
            np.testing.assert_allclose(got, expected, atol=2e-5)
        else:
            assert np.min(np.sum(got * expected, axis=1)) > 0.95
        # Padding must not leak: the padded row equals the same row run alone, unpadded.
        (alone,) = session.run(None, {"input_ids": ids[1:, :3], "attention_mask": mask[1:, :3]})
        assert float(alone[0] @ got[1]) > (0.99999 if name == "model.onnx" else 0.95)


def test_default_model_dir_never_deletes_foreign_dir(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    with pytest.raises(BackendUnavailable, match="not a funnel ONNX model directory"):
        default_model_dir(target)
    assert (target / "notes.txt").read_text() == "keep me"


def test_default_model_dir_replaces_outdated_build(model_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "cache"
    target.mkdir()
    meta = json.loads((model_dir / "funnel_model.json").read_text())
    (target / "funnel_model.json").write_text(json.dumps({**meta, "builder_version": -1}))
    assert default_model_dir(target) == target
    assert json.loads((target / "funnel_model.json").read_text()) == meta
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
