"""Real files of every type, ingested and asked about (issue 32 item 5).

Ingests bench/data/formats/docs into a fresh index, one type (file extension) at a time so that each type's
time is its own, calibrates as `funnel ingest` does, then asks every question of
bench/data/formats/questions.yaml with the default pipeline (`Pipeline.ask`: the search `funnel search`
runs, with the index's calibration, and the extractive answer unless an LLM is configured) and scores, per
type:
  file_hit@5        a top-5 document is the question's file
  location_hit@5    one of the answer's first 5 citations is in the file, at the place `where` names
  chunk_location@5  the same for the 5 best chunks of the search (a hit the answer may not have cited)
  answer_passed     the answer holds every `answer_contains` string (case and white space ignored)
Where a citation must point (`where` in the question set): `page` -> the chunk's page (a lone image:
page 1, or no page); `slide` -> its page (a slide is a presentation's page unit); `sheet` + `row` -> its
heading names the sheet and line_start <= row <= line_end; `row` alone (CSV) -> the line range;
`section` -> its heading holds the text; `message` + `subject` (mail) -> its heading holds the subject,
or its page is the message's number. The `expect: abstain` questions are scored by whether the answer
abstained (abstained_unanswerable; abstained_answerable counts the others that did, wrongly); what came back is
recorded. Until a type has a loader its files are reported as not ingested; that is a result, not an error.

    .venv/bin/python bench/formats.py [--index DIR] [--out bench/results/formats.json] [--limit N]
                                      [--data bench/data/hwp]  (another folder of questions.yaml + docs)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "formats"
TOP = 5


def words(text: str | None) -> str:
    """Lower case, every run of white space (a no-break space too) one space."""
    return " ".join((text or "").split()).lower()


def type_of(path: Path) -> str:
    return path.suffix.lower().lstrip(".")


def same_file(path: str, source: str) -> bool:
    posix = Path(path).as_posix()
    return posix == source or posix.endswith("/" + source)


def at_place(unit, where: dict, kind: str) -> bool:
    """Whether a chunk or citation (page, line_start, line_end, heading) stands where `where` says."""
    heading = words(unit.heading)
    page = unit.page
    if "slide" in where:
        return page == where["slide"]
    if "page" in where:
        lone_image = kind in ("png", "jpg", "jpeg", "tif", "tiff")
        return page == where["page"] or (lone_image and page is None and where["page"] == 1)
    if "row" in where:
        start, end = unit.line_start, unit.line_end if unit.line_end is not None else unit.line_start
        in_rows = start is not None and start <= where["row"] <= end
        return in_rows and ("sheet" not in where or words(where["sheet"]) in heading)
    if "section" in where:
        return words(where["section"]) in heading
    if "message" in where:
        return (bool(where.get("subject")) and words(where["subject"]) in heading) or page == where["message"]
    return True


def place(unit) -> dict:
    return {"path": unit.path, "location": unit.location, "heading": unit.heading}


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              timeout=10)
        return done.stdout.strip() or None
    except OSError:
        return None


def ingest(pipeline, docs: Path) -> tuple[dict, dict]:
    """Each type's files in an ingest of their own: {type: summary}, and the calibration's outcome."""
    by_type: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(p for p in docs.iterdir() if p.is_file()):
        by_type[type_of(path)].append(path.resolve())
    summary = {}
    for kind, files in sorted(by_type.items()):
        report = pipeline.ingest(files)
        problems = [{"path": Path(p.path).name, "reason": p.reason} for p in report.problems]
        not_taken = sum(report.unsupported.values())
        summary[kind] = {
            "files": len(files), "ingested": report.added + report.updated + report.unchanged,
            "reported": len(problems), "not_a_document_type": not_taken, "chunks": report.chunks,
            "seconds": round(report.seconds, 3), "problems": problems,
        }
    from funnel.calibrate import DEFAULT_QUERIES
    from funnel.errors import FunnelError

    try:  # as `funnel ingest` does after an ingest that changed the index; a failure is a warning there too
        result = pipeline.calibrate(DEFAULT_QUERIES)
        calibration = {"first_stage": str(result.first_stage), "second_stage": str(result.option),
                       "reason": result.reason, "seconds": round(result.seconds, 1)}
    except FunnelError as e:
        calibration = {"error": str(e)}
    return summary, calibration


def ask_all(pipeline, questions: list[dict]) -> list[dict]:
    rows = []
    for q in questions:
        t0 = time.perf_counter()
        try:
            answer = pipeline.ask(q["question"])
        except Exception as e:  # a loader's or the pipeline's failure on one question is a result to record
            rows.append({"id": q["id"], "type": q.get("type"), "error": f"{type(e).__name__}: {e}"})
            continue
        seconds = time.perf_counter() - t0
        result = answer.search
        documents = list(result.documents[:TOP]) if result else []
        hits = list(result.hits[:TOP]) if result else []
        citations = list(answer.citations[:TOP])
        row = {"id": q["id"], "type": q.get("type"), "question": q["question"], "answer": answer.text,
               "generator": answer.generator, "seconds": round(seconds, 3), "abstained": answer.abstained,
               "expect_abstain": q.get("expect") == "abstain",
               "citations": [place(c) for c in citations],
               "documents": [d.path for d in documents]}
        sources, expected = q.get("sources") or [], q.get("answer_contains") or []
        if sources:
            source, where, kind = sources[0], q.get("where") or {}, q.get("type") or ""
            row["file_hit@5"] = any(same_file(d.path, source) for d in documents)
            row["location_hit@5"] = any(
                same_file(c.path, source) and at_place(c, where, kind) for c in citations)
            row["chunk_location@5"] = any(
                same_file(h.chunk.path, source) and at_place(h.chunk, where, kind) for h in hits)
            row["answer_passed"] = not answer.abstained and all(words(s) in words(answer.text) for s in expected)
            # A reader's answer is shown with the picker's sentences beside it (its quote): what the person reads.
            shown = "\n".join([answer.text, *(c.text for c in answer.quote)])
            row["answer_with_quote_passed"] = not answer.abstained and all(words(s) in words(shown) for s in expected)
            row["where"] = where
        rows.append(row)
    return rows


def per_type(rows: list[dict]) -> dict:
    out: dict[str, dict] = {}
    scored = [r for r in rows if r.get("type")]  # the unanswerable ones have no type
    for kind in sorted({r["type"] for r in scored}):
        mine = [r for r in scored if r["type"] == kind]
        n = len(mine)
        out[kind] = {"questions": n, "errors": sum("error" in r for r in mine)}
        for metric in ("file_hit@5", "location_hit@5", "chunk_location@5", "answer_passed", "answer_with_quote_passed"):
            out[kind][metric] = sum(bool(r.get(metric)) for r in mine)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", help="a folder for the new index (default: a temporary one)")
    parser.add_argument("--out", default=str(HERE / "results" / "formats.json"))
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--data", default=str(DATA), help="a folder holding questions.yaml and its documents")
    args = parser.parse_args()
    from funnel.apps.settings import load_settings
    from funnel.pipeline import Pipeline

    folder = Path(args.data)
    data = yaml.safe_load((folder / "questions.yaml").read_text(encoding="utf-8"))
    docs = (folder / data.get("documents", "docs")).resolve()
    questions = data["questions"][: args.limit]
    with tempfile.TemporaryDirectory(prefix="funnel-formats-") as tmp:
        index = Path(args.index) if args.index else Path(tmp) / "index"
        if index.exists() and any(index.iterdir()):
            raise SystemExit(f"{index} is not empty: the bench needs a fresh index")
        pipeline = Pipeline.build(load_settings(index=str(index)).engine())
        t0 = time.perf_counter()
        ingested, calibration = ingest(pipeline, docs)
        ingest_seconds = time.perf_counter() - t0
        print(f"ingest ({ingest_seconds:.1f}s with calibration: {calibration})")
        print(f"{'type':6} {'files':>5} {'ingested':>8} {'reported':>8} {'not-doc':>7} {'chunks':>6} "
              f"{'seconds':>8}")
        for kind, s in ingested.items():
            print(f"{kind:6} {s['files']:5} {s['ingested']:8} {s['reported']:8} {s['not_a_document_type']:7} "
                  f"{s['chunks']:6} {s['seconds']:8.2f}")
            for p in s["problems"]:
                print(f"         {p['path']}: {p['reason'][:110]}")
        rows = ask_all(pipeline, questions)
    table = per_type(rows)
    print(f"\n{'type':6} {'qs':>3} {'file@5':>6} {'loc@5':>6} {'chunk@5':>7} {'answer':>6} {'errors':>6}")
    totals: Counter = Counter()
    for kind, s in table.items():
        totals.update(s)
        print(f"{kind:6} {s['questions']:3} {s['file_hit@5']:6} {s['location_hit@5']:6} "
              f"{s['chunk_location@5']:7} {s['answer_passed']:6} {s['errors']:6}")
    print(f"{'all':6} {totals['questions']:3} {totals['file_hit@5']:6} {totals['location_hit@5']:6} "
          f"{totals['chunk_location@5']:7} {totals['answer_passed']:6} {totals['errors']:6}")
    if totals["answer_with_quote_passed"] != totals["answer_passed"]:
        print(f"answers with a reader's quote beside them: {totals['answer_with_quote_passed']}")
    unanswerable = [r for r in rows if r.get("expect_abstain")]
    answerable = [r for r in rows if r.get("type") and "error" not in r]
    abstention = {
        "abstained_unanswerable": sum(r.get("abstained", False) for r in unanswerable) / max(1, len(unanswerable)),
        "abstained_answerable": sum(r["abstained"] for r in answerable) / max(1, len(answerable)),
    }
    print(f"abstained: {abstention['abstained_unanswerable']:.2f} of {len(unanswerable)} unanswerable, "
          f"{abstention['abstained_answerable']:.3f} of {len(answerable)} answerable (wrongly)")
    for r in unanswerable:
        cited = ", ".join(f"{Path(c['path']).name} {c['location']}" for c in r.get("citations", [])[:3])
        print(f"{r['id']}: {words(r.get('answer', r.get('error')))[:100]!r} [{cited}]")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "commit": git_commit(), "questions": len(questions), "top": TOP,
        "ingest": ingested, "ingest_seconds": round(ingest_seconds, 1), "calibration": calibration,
        "by_type": table, "totals": dict(totals), **abstention, "per_question": rows,
    }, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
