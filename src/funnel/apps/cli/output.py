"""How the commands print: documents, answers, the explain table, and their JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from rich.table import Table
from rich.text import Text

from funnel.apps.cli.common import err, out, styled
from funnel.errors import ConfigError
from funnel.rerank.policies import PolicyChoice, Rrf
from funnel.generate.step import AnswerStep
from funnel.types import Answer, SearchResult


def print_calibration(result) -> None:
    made = "judged queries" if result.source == "judged" else "queries made from the index"
    table = Table(title=f"MRR@10 on {result.queries} {made}", title_justify="left")
    table.add_column("option")
    kinds = sorted(result.mrr_by_kind)
    for column in ("all", *kinds):
        table.add_column(column, justify="right")
    for name, value in result.mrr.items():
        marker = " (chosen)" if name == result.option else ""
        table.add_row(name + marker, f"{value:.4f}", *[f"{result.mrr_by_kind[k][name]:.4f}" for k in kinds])
    out.print(table)
    if result.first_stage_mrr:
        marks = {name: " (chosen)" if name == result.first_stage else "" for name in result.first_stage_mrr}
        out.print("first stage MRR@10: " + ", ".join(f"{name}{marks[name]} {value:.4f}"
                                                     for name, value in result.first_stage_mrr.items()))
    out.print(f"answer in the first-stage window: {result.window_recall:.0%} of the queries; "
              f"reranker {result.reranker}, embedder {result.embedder}")
    if result.abstain_threshold is not None:
        m = result.abstain_measured
        out.print(f"abstention: evidence below {result.abstain_threshold:.2f} abstains ({result.abstain_reason}); "
                  f"{m['foreign_abstained']:.0%} of {m['foreign_questions']} questions about other matters would, "
                  f"{m['answerable_abstained']:.0%} of {m['answerable_queries']} sentences of these documents")


def place(location: str, heading: str | None) -> str:
    """Where a passage is: its location in the file (`p.3`, `row 4-6`, `L12-14`), then its heading trail."""
    return f"{location} · {heading}" if heading else location


def print_documents(result: SearchResult) -> None:
    if not result.documents:
        out.print("no matching documents")
    for doc in result.documents:
        best = doc.best.chunk
        out.print(Text.assemble((f"{doc.rank}. {doc.path}", "bold"),
                                f" ({place(best.location, best.heading)})  score {doc.score:.4f}"))
        snippet = " ".join(best.text.split())
        out.print(f"   {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    print_status(result)


def print_status(result: SearchResult) -> None:
    reason = f" ({result.rerank_reason})" if result.rerank_reason else ""
    timing = ", ".join(f"{name} {ms:.0f} ms" for name, ms in result.timings_ms.items())
    err.print(f"first stage: {result.first_stage}; rerank: {result.rerank_status.value}{reason}; "
              f"policy {result.policy}; {timing}")
    for note in result.notes:
        err.print(styled("note:", "yellow", note))


def print_explain(result: SearchResult) -> None:
    table = Table(title=f"candidates for {result.query!r}", title_justify="left")
    for column in ("final", "bm25", "dense", "fused", "rerank score", "slot", "document", "where"):
        text_column = column in ("document", "where", "slot")
        table.add_column(column, justify="left" if text_column else "right", overflow="fold")
    for hit in result.hits:
        c = hit.candidate
        table.add_row(
            str(hit.final_rank),
            str(c.bm25_rank or "-"),
            str(c.dense_rank or "-"),
            str(c.fused_rank),
            "-" if hit.rerank_score is None else f"{hit.rerank_score:.3f}",
            "guaranteed" if hit.guaranteed else "past cap" if c.past_cap else "",
            c.chunk.path,
            place(c.chunk.location, c.chunk.heading),
        )
    out.print(table)
    out.print(window_note(result))


def window_note(result: SearchResult) -> str:
    """How full the second stage's window was, and whether the per-document cap shaped it."""
    n = len(result.hits)
    documents = len({h.chunk.doc_id for h in result.hits})
    filled = sum(h.candidate.past_cap for h in result.hits)
    scored = sum(h.rerank_score is not None for h in result.hits)
    line = f"window: {n} candidates from {documents} document(s); the reranker scored {scored}"
    if filled:
        line += (f"; the cap of chunks per document would have left {n - filled}, so {filled} chunks past "
                 "the cap (marked) filled the window")
    needed = _gate(result.policy)
    scores = sorted((h.rerank_score for h in result.hits if h.rerank_score is not None), reverse=True)
    if needed and len(scores) > 1:
        line += (f"; its best score led its second by {scores[0] - scores[1]:.3f}, " + (
            f"at least the gate {needed:g}, so it reordered" if Rrf(gate=needed).sure(scores)
            else f"under the gate {needed:g}, so the first-stage order stands"))
    return line


def _gate(label: str) -> float | None:
    """The gate a result's policy label names (`auto: rrf:1|gate:0.2` -> 0.2), if any."""
    try:
        return PolicyChoice.parse(label).gate
    except ConfigError:
        return None


def print_calibration_note(pipeline) -> None:
    """Under --explain: what the index's calibration chose and why (or why there is none)."""
    problem = pipeline.calibration_problem()
    if problem is not None:
        out.print(f"calibration: {problem}")
        return
    c = pipeline.calibration()
    if c.languages:
        out.print("languages: " + ", ".join(f"{lang} {share:.0%}" for lang, share in c.languages.items()))
    out.print(f"calibration ({c.created}, {c.queries} queries, reranker {c.reranker}): first stage "
              f"{c.first_stage} — {c.first_stage_reason or 'not measured'}; "
              f"second stage {c.option} — {c.reason}")
    if c.abstain_threshold is not None:
        out.print(f"abstention threshold {c.abstain_threshold:.2f} ({c.abstain_reason})")


def print_answer(answer: Answer, shown: bool = False) -> None:
    """The answer, its citations and status; `shown`: its question and text were streamed already."""
    if not shown:
        out.print(styled("Q:", "bold", answer.question))
        out.print(answer.text)
    out.print()
    if not shown:
        print_quote(answer.quote)
    if answer.abstained and answer.citations:
        out.print("closest, not an answer:", style="yellow")
    for c in answer.citations:
        out.print(f"[{c.number}] {c.path} ({place(c.location, c.heading)})")
    out.print(f"answered by: {answer.generator}" + (" (abstained)" if answer.abstained else ""), style="dim")
    if answer.fallback_reason:
        err.print(styled("note:", "yellow", f"the LLM did not answer ({answer.fallback_reason})"))
    if answer.flags:
        err.print(styled("flags:", "yellow", ", ".join(answer.flags)))
    if answer.search is not None:
        print_status(answer.search)


def result_json(result: SearchResult) -> dict:
    data = asdict(result)
    data["rerank_status"] = result.rerank_status.value
    # `location` is a property, which asdict leaves out: each chunk gets it beside its page and lines.
    for doc, doc_data in zip(result.documents, data["documents"]):
        for hit, hit_data in zip(doc.hits, doc_data["hits"]):
            hit_data["candidate"]["chunk"]["location"] = hit.chunk.location
    for hit, hit_data in zip(result.hits, data["hits"]):
        hit_data["candidate"]["chunk"]["location"] = hit.chunk.location
    return json.loads(json.dumps(data, default=str))


def answer_json(answer: Answer) -> dict:
    return {
        "question": answer.question,
        "answer": answer.text,
        "generator": answer.generator,
        "fallback_reason": answer.fallback_reason,
        "flags": list(answer.flags),
        # true: the documents do not support an answer; the citations are the closest passages, not an answer
        "abstained": answer.abstained,
        "evidence": answer.evidence,
        "quote": [asdict(c) for c in answer.quote],
        "citations": [asdict(c) for c in answer.citations],
        "search": result_json(answer.search) if answer.search else None,
    }


def print_quote(quote) -> None:
    """A reader's quoted sentences (the picker's), verbatim, each with where it stands."""
    for c in quote:
        out.print(styled("From the page:", "dim", f"“{c.text}” ({c.path}, {place(c.location, c.heading)})"))


def stream_answer(step: AnswerStep) -> Answer:
    """The answer step's text printed as it comes (the reader's sentences, each checked), then its answer. A
    reader's quoted sentences come first, at once, while the model reads."""
    out.print(styled("Q:", "bold", step.question))
    print_quote(step.quote())
    stream = step.stream()
    for delta in stream:
        out.print(delta, end="", markup=False, highlight=False, soft_wrap=True)
        out.file.flush()
    out.print()
    assert stream.answer is not None
    return stream.answer


def show(pipeline, found: SearchResult | Answer, explain: bool, as_json: bool, streamed: bool = False) -> None:
    """`search`'s result or `ask`'s answer: as JSON, or printed, with the retrieval behind it under --explain
    (`streamed`: the answer's text was printed as it came)."""
    if as_json:
        out.print_json(json.dumps(answer_json(found) if isinstance(found, Answer) else result_json(found)))
        return
    if isinstance(found, Answer):
        print_answer(found, shown=streamed)
    else:
        print_documents(found)
    search = found.search if isinstance(found, Answer) else found
    if explain and search is not None:
        print_explain(search)
        if isinstance(found, Answer) and (evidence := pipeline.evidence(search)) is not None:
            out.print(f"abstention: {evidence.describe()}")
        print_calibration_note(pipeline)
