"""The reader against the sentence picker, side by side on one question set: the same search, the same gate,
both answerers on every question, in one run (issue 39).

    python bench/reader.py bench/data/realpdf/questions.yaml [--limit N] [--model PATH.gguf] [--threads 2]
        [--only ID_PREFIX] [--json OUT] [--index DIR] [--passages 3] [--passage-chars 900]

Prints, per answerer: answers passed (every `answer_contains` string in the text, no abstention), and for the
reader also with its quote (the picker's sentences, shown beside its answer as "From the page"), unanswerable
questions that abstained, answerable ones wrongly abstained; for the reader how its sentences were settled
(kept, mended, dropped), how often the picker stood in and why; latency p50/p95 of the first shown text and of
the whole answer (the reader's first shown text is its quote, when it has one); prompt and generation tokens per second. The index is built once per question set under
~/.cache/funnel/bench-reader (ingest and calibration, as `funnel ingest` does). Needs `make llm`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from funnel.engine_config import EngineConfig
from funnel.eval.questions import load_questions
from funnel.generate.context import with_continuations
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.local import LocalChat
from funnel.generate.reader import ReaderGenerator
from funnel.pipeline import Pipeline


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def stream_tokens(chat: LocalChat) -> int:
    """The prompt tokens of the reader's latest call (llama.cpp's context holds prompt + answer)."""
    llama = chat._llama
    return int(llama.n_tokens - chat.last_stats.get("answer_tokens", 0)) if llama is not None else 0


def index_for(path: Path, documents: tuple[Path, ...], root: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
    index = root / f"{path.parent.name}-{key}"
    if not (index / ".built").exists():
        pipeline = Pipeline.build(EngineConfig(index=str(index)))
        pipeline.ingest(list(documents))
        pipeline.calibrate()
        (index / ".built").write_text("ok")
    return index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", type=Path)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--only", help="only the questions whose id starts with this")
    parser.add_argument("--model", type=Path, help="a GGUF (default: the packaged reader)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--index", type=Path)
    parser.add_argument("--passages", type=int, default=3, help="chunks the model reads")
    parser.add_argument("--passage-chars", type=int, default=900, help="window of each")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--root", type=Path, default=Path.home() / ".cache" / "funnel" / "bench-reader")
    args = parser.parse_args()

    suite = load_questions(args.questions)
    index = args.index or index_for(args.questions, suite.documents, args.root)
    pipeline = Pipeline.build(EngineConfig(index=str(index)))
    picker = ExtractiveGenerator(pipeline.embedder)
    chat = LocalChat(args.model, threads=args.threads, timeout_s=120)
    t0 = time.perf_counter()
    chat.warm_up()
    load_s = time.perf_counter() - t0
    reader = ReaderGenerator(chat, picker, passages=args.passages, passage_chars=args.passage_chars)
    evalset = suite.evalset
    ids = [q for q in evalset.queries if not args.only or q.startswith(args.only)][: args.limit]
    rows = []
    for qid in ids:
        question = evalset.queries[qid]
        result = with_continuations(pipeline.search(question), pipeline.store)
        row = {"id": qid, "answerable": qid not in evalset.abstain, "expected": evalset.answers.get(qid, [])}
        for name, generator in (("picker", picker), ("reader", reader)):
            step = pipeline.prepare(result, generator)
            started = time.perf_counter()
            quote = step.quote()  # a reader's: the picker's sentences, shown before the model's first word
            first = time.perf_counter() - started if quote else None
            stream = step.stream()
            for delta in stream:
                if first is None and delta.strip():
                    first = time.perf_counter() - started
            whole = time.perf_counter() - started
            answer = stream.answer
            text = answer.text.lower()
            shown = "\n".join([text, *(c.text.lower() for c in answer.quote)])
            row[name] = {
                "text": answer.text, "flags": list(answer.flags), "abstained": answer.abstained,
                "passed": (not answer.abstained and bool(row["expected"])
                           and all(s.lower() in text for s in row["expected"])),
                "passed_with_quote": (not answer.abstained and bool(row["expected"])
                                      and all(s.lower() in shown for s in row["expected"])),
                "quote": [c.text for c in answer.quote],
                "first_s": first if first is not None else whole, "whole_s": whole,
                "gated": step.abstains,
            }
            if name == "reader" and not row[name]["gated"]:
                row[name]["stats"] = {**chat.last_stats, "prompt_tokens": stream_tokens(chat)}
        rows.append(row)
        print(f"{qid:45} picker {'PASS' if row['picker']['passed'] else '----'}  reader "
              f"{'PASS' if row['reader']['passed'] else '----'} {row['reader']['flags']} "
              f"{row['reader']['whole_s']:.1f}s", flush=True)
    report(rows, load_s, args)
    if args.json:
        args.json.write_text(json.dumps({"questions": str(args.questions), "rows": rows}, indent=1))
    return 0


def report(rows: list[dict], load_s: float, args) -> None:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    print(f"\n{args.questions}: {len(answerable)} answerable, {len(unanswerable)} unanswerable; model load {load_s:.1f} s")
    print(f"{'':28}{'picker':>12}{'reader':>12}")
    for label, key in (("answers passed", "passed"), ("with the quote shown beside", "passed_with_quote")):
        line = [sum(r[n][key] for r in answerable) for n in ("picker", "reader")]
        print(f"{label:28}" + "".join(f"{f'{v}/{len(answerable)}':>12}" for v in line))
    both = sum(r["picker"]["passed"] or r["reader"]["passed"] for r in answerable)
    print(f"{'either one passed':28}{both:>12}/{len(answerable)}")
    for label, group in (("unanswerable abstained", unanswerable), ("answerable abstained", answerable)):
        line = [sum(r[n]["abstained"] for r in group) for n in ("picker", "reader")]
        print(f"{label:28}" + "".join(f"{f'{v}/{len(group)}':>12}" for v in line))
    read = [r["reader"] for r in rows if not r["reader"]["gated"]]
    flags = Counter(f.split(":")[0] for r in read for f in r["flags"])
    settled = Counter()
    for r in read:
        for f in r["flags"]:
            if ":" in f:
                name, n = f.split(":")
                settled[name] += int(n)
    print(f"reader ran on {len(read)}: shown as read {flags['read']}, picker stood in {flags['picker']} "
          f"(refused {flags['reader_refused']}, all dropped {flags['reader_dropped']}); sentences mended "
          f"{settled['mended']}, dropped {settled['dropped']}")
    for name in ("picker", "reader"):
        first = [r[name]["first_s"] for r in rows if not r[name]["gated"]]
        whole = [r[name]["whole_s"] for r in rows if not r[name]["gated"]]
        print(f"{name}: first text p50 {percentile(first, .5):.2f} s p95 {percentile(first, .95):.2f} s; "
              f"whole answer p50 {percentile(whole, .5):.2f} s p95 {percentile(whole, .95):.2f} s")
    stats = [r["reader"]["stats"] for r in rows if "stats" in r["reader"]]
    gen = [s["answer_tokens"] / max(1e-6, s["seconds"] - s["first_token_s"]) for s in stats if s["answer_tokens"] > 1]
    prompt = [s["prompt_tokens"] for s in stats]
    print(f"reader prompt {statistics.median(prompt) if prompt else 0:.0f} tokens (median, the cached system "
          f"prompt included); generation {statistics.median(gen) if gen else float('nan'):.1f} tokens/s (median); "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    sys.exit(main())
