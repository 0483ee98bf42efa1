"""Abstention's evidence on a question set: per question, what `funnel.generate.abstain.measure` sees, and how
many answerable questions (false abstentions) and `expect: abstain` questions (abstentions) each threshold
would abstain on.

    python bench/abstention.py QUESTIONS.yaml --index DIR [--threshold T] [--per-question]

The index must hold the set's documents already (`funnel ingest DOCS --index DIR`). Prints a table; --json
writes the numbers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import funnel
from funnel.eval.questions import load_questions
from funnel.generate.abstain import measure
from funnel.generate.context import with_continuations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("questions", type=Path)
    parser.add_argument("--index", required=True)
    parser.add_argument("--per-question", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    qs = load_questions(args.questions).evalset
    pipeline = funnel.open(args.index)
    rows = []
    for qid, question in qs.queries.items():
        if qid not in qs.abstain and not qs.answers.get(qid):
            continue
        result = with_continuations(pipeline.search(question), pipeline.store)
        ev = measure(question, result, pipeline.store)
        rows.append({"id": qid, "unanswerable": qid in qs.abstain, "score": ev.score, "coverage": ev.coverage,
                     "absent": ev.absent, "similarity": ev.similarity, "agreement": ev.agreement, "gap": ev.gap,
                     "terms": ev.terms})
        if args.per_question:
            kind = "U" if qid in qs.abstain else "A"
            print(f"{kind} {ev.describe():90s} {qid}")
    answerable = sorted(r["score"] for r in rows if not r["unanswerable"])
    unanswerable = sorted(r["score"] for r in rows if r["unanswerable"])
    print(f"{args.questions}: {len(answerable)} answerable, {len(unanswerable)} unanswerable")
    print("threshold  false abstentions (answerable)  abstentions (unanswerable)")
    for t in [x / 20 for x in range(2, 15)]:
        fa = sum(s < t for s in answerable) / max(1, len(answerable))
        ab = sum(s < t for s in unanswerable) / max(1, len(unanswerable))
        print(f"{t:9.2f}  {fa:29.3f}  {ab:26.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
