"""The fp32 checkpoint the seed's CrossEncoder runs, and the check that it holds funnel's reranker: role
seed-check (runs in .venv-seed) scores the funnel run's pairs with torch; the parent compares them with
ONNX fp32 and the shipped int8 model."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from .common import ROOT

TEACHER = Path.home() / ".cache" / "funnel" / "reranker-teacher-l6"
EXPORTED = Path.home() / ".cache" / "funnel" / "reranker-int8-as-fp32"
EXPORTER = ROOT / "tools" / "export_reranker_checkpoint.py"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def role_seed_check(spec: dict) -> dict:
    """Raw logits of the torch CrossEncoder on the pairs the funnel run recorded."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(spec["threads"])
    cross = CrossEncoder(spec["cross_encoder"], max_length=spec["max_length"], device="cpu")
    groups = json.loads(Path(spec["check_file"]).read_text())
    logits = []
    for g in groups:
        raw = cross.predict([(g["query"], t) for t in g["texts"]], activation_fn=torch.nn.Identity(),
                            show_progress_bar=False)
        logits.append([float(x) for x in raw])
    return {"logits": logits}


def _load_exporter():
    """tools/export_reranker_checkpoint.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("export_reranker_checkpoint", EXPORTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def has_checkpoint(path: Path) -> bool:
    return all((path / f).is_file() for f in CHECKPOINT_FILES)


def exported_checkpoint(out: Path = EXPORTED) -> Path:
    """The shipped int8 reranker dequantized to an fp32 HF checkpoint, (re)built when the shipped model or
    the exporter changed; numpy + onnx only, a few seconds."""
    from funnel.rerank.onnx_cross_encoder import builtin_model_dir

    exporter = _load_exporter()
    shipped = builtin_model_dir()
    meta = json.loads((shipped / "funnel_model.json").read_text())
    digest = hashlib.sha256((shipped / meta["files"]["int8"]).read_bytes()).hexdigest()
    info_path = out / exporter.INFO_FILE
    if has_checkpoint(out) and info_path.is_file():
        info = json.loads(info_path.read_text())
        if info.get("source_sha256") == digest and info.get("export_version") == exporter.EXPORT_VERSION:
            return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    exporter.export(partial, shipped)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def is_exported(path: Path) -> bool:
    """A checkpoint written by tools/export_reranker_checkpoint.py (dequantized int8), not a trained one."""
    return (path / "export_info.json").is_file()


def _int8_initializers_compare(rebuilt: Path, shipped: Path) -> dict:
    """Quantised (integer) initializers identical? Largest difference of the float ones (scales, biases)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    def tensors(path: Path) -> dict:
        return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}

    a, b = tensors(rebuilt), tensors(shipped)
    if set(a) != set(b):
        return {"same_names": False, "integer_identical": False, "max_float_diff": None}
    ints = [k for k in a if a[k].dtype.kind in "iu" and k.endswith("_quantized")]
    floats = [k for k in a if a[k].dtype.kind == "f"]
    return {
        "same_names": True,
        "integer_tensors": len(ints),
        "integer_identical": all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in ints),
        "max_float_diff": float(max((np.abs(a[k] - b[k]).max() for k in floats if a[k].size), default=0.0)),
    }




def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _score_agreement(groups: list[dict], torch_logits: list[list[float]], fp32, int8) -> dict:
    """torch's logits against ONNX fp32 (the same weights) and the shipped int8, on real candidate lists."""
    import numpy as np
    from scipy.stats import kendalltau

    from funnel.types import Candidate, Chunk

    d_fp32, d_int8, d_sig, taus, top1 = [], [], [], [], []
    for group, ref in zip(groups, torch_logits):
        cands = [Candidate(Chunk(str(i), "", i, t, "", "", "record", 0), i + 1, 0.0)
                 for i, t in enumerate(group["texts"])]
        a = np.array(ref)
        b = np.array(fp32.rerank(group["query"], cands).raw_scores)
        c = np.array(int8.rerank(group["query"], cands).raw_scores)
        d_fp32.append(np.abs(a - b).max())
        d_int8.append(np.abs(a - c).max())
        d_sig.append(np.abs(1 / (1 + np.exp(-a)) - 1 / (1 + np.exp(-c))).max())
        taus.append(kendalltau(a, c).statistic)
        top1.append(int(np.argmax(a) == np.argmax(c)))
    return {
        "queries": len(groups), "pairs": sum(len(g["texts"]) for g in groups),
        "max_abs_logit_torch_vs_onnx_fp32": float(max(d_fp32)),
        "max_abs_logit_torch_vs_int8": float(max(d_int8)),
        "max_abs_sigmoid_torch_vs_int8": float(max(d_sig)),
        "kendall_tau_torch_vs_int8_mean": float(np.mean(taus)),
        "top1_agreement_torch_vs_int8": float(np.mean(top1)),
    }


def _provenance(checkpoint: Path, built: Path, shipped: Path, meta: dict, source: str) -> dict:
    """For a trained fp32 checkpoint: provenance hash and a rebuilt int8 byte-identical to the shipped one.
    For a dequantized export: quantising it again gives the shipped int8 weights."""
    from funnel.onnx import build as onnx_build

    if is_exported(checkpoint):
        # A dequantized export cannot hash to the trained checkpoint nor requantise byte for byte (the
        # query projection's folded 1/sqrt(d) rounds in float32), but its int8 weights must come back.
        info = json.loads((checkpoint / "export_info.json").read_text())
        requant = _int8_initializers_compare(built / onnx_build.INT8_FILE, shipped / meta["files"]["int8"])
        return {
            "export_of_shipped": info.get("source_sha256") == _sha256(shipped / meta["files"]["int8"]),
            "requantized_int8_weights_identical": requant["integer_identical"],
            "requantized_max_float_diff": requant["max_float_diff"],
        }
    return {
        "hash_matches_shipped": source == meta.get("source_sha256"),
        "rebuilt_int8_identical": _sha256(built / onnx_build.INT8_FILE) == _sha256(shipped / meta["files"]["int8"]),
    }


def check_cross_encoder(checkpoint: Path, groups: list[dict], torch_logits: list[list[float]], work: Path,
                        threads: int, max_length: int) -> dict:
    """Is the checkpoint the shipped reranker? For a trained fp32 checkpoint: provenance hash and a rebuilt
    int8 byte-identical to the shipped one. For a dequantized export: quantising it again gives the shipped
    int8 weights. Either way, scores: torch vs ONNX fp32 (same weights) vs the shipped int8 on real
    candidate lists, every pair cut at the torch side's `max_length` (the product's own shorter default would
    compare different text)."""
    from funnel.onnx import build as onnx_build
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder, builtin_model_dir

    shipped = builtin_model_dir()
    meta = json.loads((shipped / onnx_build.META_FILE).read_text())
    source = onnx_build.source_hash(checkpoint)
    built = work / f"checkpoint-onnx-{source[:12]}"
    if not (built / onnx_build.META_FILE).is_file():
        shutil.rmtree(built, ignore_errors=True)
        # The shipped build's name, which the graph records: with it, a deterministic build is byte-identical.
        onnx_build.build_cross_encoder(checkpoint, built, name=meta["name"],
                                       max_length=meta.get("max_length", 256))

    fp32 = OnnxCrossEncoder(built, quantized=False, threads=threads, max_length=max_length)
    int8 = OnnxCrossEncoder(shipped, quantized=True, threads=threads, max_length=max_length)
    result = {"checkpoint": "int8 dequantized to fp32" if is_exported(checkpoint) else "trained fp32",
              **_score_agreement(groups, torch_logits, fp32, int8)}
    result.update(_provenance(checkpoint, built, shipped, meta, source))
    return result


def choose_cross_encoder(given: Path | None) -> Path:
    """--cross-encoder, checked; without it the trained checkpoint a `make reranker` left, else the shipped
    int8 model dequantized to fp32."""
    if given is None:
        if has_checkpoint(TEACHER):
            return TEACHER
        chosen = exported_checkpoint()
        print(f"compare_seed_stack: no trained fp32 checkpoint in {TEACHER}; the CrossEncoder uses the "
              f"shipped int8 reranker dequantized to fp32 ({EXPORTER.relative_to(ROOT)}) in "
              f"{chosen}", file=sys.stderr, flush=True)
        return chosen
    if not has_checkpoint(given):
        raise SystemExit(
            f"compare_seed_stack: no fp32 reranker checkpoint in {given} "
            f"({', '.join(CHECKPOINT_FILES)}): leave out --cross-encoder to use the shipped model's dequantized "
            f"weights, or rebuild the trained one with `make reranker` and copy ~/.cache/funnel/train-reranker/best "
            f"to {TEACHER}")
    return given
