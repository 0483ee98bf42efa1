"""tools/export_reranker_checkpoint.py: the shipped int8 reranker as a Hugging Face checkpoint (numpy + onnx
only, no torch). The state dict must be exactly BertForSequenceClassification's, the config must agree with
it, the mapping must be the inverse of funnel.onnx.build's, and the weights must score like the
shipped model."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from bert_reference import dense, encode
from onnx import numpy_helper
from tokenizers import Tokenizer

from funnel.onnx import build as onnx_build
from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir
from funnel.types import Candidate, Chunk

ROOT = Path(__file__).resolve().parents[1]


def _exporter():
    spec = importlib.util.spec_from_file_location("export_reranker_checkpoint", ROOT / "tools" /
                                                  "export_reranker_checkpoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    exporter = _exporter()
    out = exporter.export(tmp_path_factory.mktemp("export") / "ckpt")
    return exporter, out, exporter.read_safetensors(out / "model.safetensors")


def test_files_and_config(exported):
    exporter, out, tensors = exported
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt", "export_info.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["model_type"] == "bert"
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["intermediate_size"], config["vocab_size"], config["max_position_embeddings"],
            config["type_vocab_size"], config["num_labels"]) == (384, 6, 12, 1536, 30522, 512, 2, 1)
    assert config["hidden_act"] == "gelu" and config["layer_norm_eps"] == pytest.approx(1e-12)
    # the state dict is exactly BertForSequenceClassification's for this config, float32
    assert {k: tuple(v.shape) for k, v in tensors.items()} == exporter.expected_keys(config)
    assert all(v.dtype == np.float32 for v in tensors.values())
    assert sum(v.size for v in tensors.values()) == 22_713_601
    info = json.loads((out / "export_info.json").read_text())
    assert info["source_meta"]["name"] == "funnel-reranker-minilm"
    assert info["dequantized"]["encoder.layer.0.intermediate.dense.weight_t"]["axis"] == 1
    assert info["dequantized"]["word_embeddings"]["axis"] is None


def test_tokenizer_files(exported):
    _, out, _ = exported
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == 30522
    assert [vocab[i] for i in (0, 100, 101, 102, 103)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    assert all(vocab[i] == t for t, i in tokenizer["model"]["vocab"].items())
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["model_max_length"] == 256
    assert config["cls_token"] == "[CLS]" and config["sep_token"] == "[SEP]"


def test_safetensors_header_is_standard(exported):
    _, out, tensors = exported
    safetensors = pytest.importorskip("safetensors.numpy")
    loaded = safetensors.load_file(str(out / "model.safetensors"))
    assert set(loaded) == set(tensors)
    assert all(np.array_equal(loaded[k], tensors[k]) for k in tensors)


def test_mapping_inverts_the_onnx_build(exported):
    """Rebuilding funnel's fp32 graph from the export gives back the shipped graph's initializers: the
    dequantized ones exactly (the query projection within float32 rounding of its folded 1/sqrt(d)),
    the float32 ones unchanged."""
    exporter, out, tensors = exported
    shipped = {t.name: numpy_helper.to_array(t)
               for t in onnx.load(str(builtin_model_dir() / "model_int8.onnx")).graph.initializer}
    weights = {k.removeprefix("bert."): v for k, v in tensors.items()}
    graph = onnx_build.build_classifier_graph(weights, onnx_build.read_config(out), "funnel-reranker-minilm")
    rebuilt = {t.name: numpy_helper.to_array(t) for t in graph.graph.initializer}
    checked = 0
    for name, value in rebuilt.items():
        if value.dtype != np.float32 or exporter._NOT_PARAMETERS.match(name):
            continue  # graph constants (GELU and mask scalars)
        if name + "_quantized" in shipped:
            q = shipped[name + "_quantized"].astype(np.int32)
            scale, zp = shipped[name + "_scale"], shipped[name + "_zero_point"].astype(np.int32)
            ref = ((q - zp) * scale) if scale.ndim == 0 else ((q - zp[None, :]) * scale[None, :])
        else:
            ref = shipped[name]
        tol = 1e-6 * float(np.abs(ref).max()) if ".self.query." in name else 0.0
        np.testing.assert_allclose(value, ref.astype(np.float32), rtol=0, atol=tol, err_msg=name)
        checked += 1
    assert checked == 6 * 16 + 5 + 4  # per layer 6 weights + 6 biases + 4 LayerNorm; embeddings; head


def test_scores_like_the_shipped_int8(exported):
    """Plain numpy BERT on the exported weights vs the shipped int8 ONNX: the same model up to the int8
    activations onnxruntime quantises at run time (a mapping bug gives unrelated scores)."""
    _, out, tensors = exported
    weights = {k.removeprefix("bert."): v.astype(np.float64) for k, v in tensors.items()}
    config = json.loads((out / "config.json").read_text())
    query = "vitamin d deficiency increases the risk of fractures in older adults"
    passages = [
        "Low serum vitamin D is associated with a higher incidence of hip fractures in the elderly.",
        "The stock market closed higher on Friday after strong earnings reports.",
        "Calcium and vitamin D supplementation reduced fracture risk in a randomised trial of older women.",
        "A recipe for sourdough bread needs flour, water, salt and a starter.",
    ]
    reranker = OnnxCrossEncoder(builtin_model_dir(), quantized=True, threads=1)
    candidates = [Candidate(Chunk(str(i), "", i, t, "", "", "record", 0), i + 1, 0.0) for i, t in
                  enumerate(passages)]
    shipped = np.array(reranker.rerank(query, candidates).raw_scores)
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))  # short pairs: nothing to truncate
    ours = []
    for passage in passages:
        enc = tokenizer.encode(query, passage)
        ids, types = np.array([enc.ids]), np.array([enc.type_ids])
        hidden = encode(weights, ids, np.ones_like(ids), types, config["num_attention_heads"],
                        config["num_hidden_layers"], config["layer_norm_eps"])
        pooled = np.tanh(dense(weights, hidden[:, 0], "pooler.dense"))
        ours.append(float(dense(weights, pooled, "classifier")[0, 0]))
    ours = np.array(ours)
    assert np.abs(ours - shipped).max() < 0.5, (ours, shipped)
    assert list(np.argsort(-ours)) == list(np.argsort(-shipped))
    assert math.isclose(float(np.corrcoef(ours, shipped)[0, 1]), 1.0, abs_tol=0.05)
