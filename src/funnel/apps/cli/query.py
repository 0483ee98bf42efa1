"""`funnel search`, `funnel ask` and `funnel eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from funnel.apps.cli.common import (
    LLM_HELP, EmbedderOpt, IndexOpt, JsonOpt, KOpt, PolicyOpt, RerankerOpt, RetrievalOpt, StopOnce, app, err,
    out_console, settings_from, styled,
)
from funnel.apps.cli.output import show, stream_answer
from funnel.apps.factory import build_pipeline
from funnel.index.scope import document_filter

DocumentsOpt = Annotated[Optional[list[str]], typer.Option(
    "--document", help="only this document: its path, or its id (repeat the option for several)")]


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="what to look for")],
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    k: KOpt = None,
    policy: PolicyOpt = None,
    retrieval: RetrievalOpt = None,
    reranker: RerankerOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="every candidate's rank at every stage")] = False,
    document: DocumentsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Retrieve the top documents for a query."""
    settings = settings_from(index=index, embedder=embedder, k=k, policy=policy, retrieval=retrieval, reranker=reranker)
    pipeline = build_pipeline(settings)
    scope = document_filter(pipeline.store, document or [])
    show(pipeline, pipeline.search(query, filter=scope), explain, as_json)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="a question about the ingested documents")],
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    k: KOpt = None,
    policy: PolicyOpt = None,
    reranker: RerankerOpt = None,
    llm: Annotated[Optional[str], typer.Option(help=f"{LLM_HELP} (default: extractive)")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="show the retrieval behind the answer")] = False,
    document: DocumentsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the documents, with numbered citations."""
    settings = settings_from(index=index, embedder=embedder, k=k, policy=policy, reranker=reranker, llm=llm)
    pipeline = build_pipeline(settings)
    scope = document_filter(pipeline.store, document or [])
    step = pipeline.ask_step(question, filter=scope)
    if as_json:
        show(pipeline, step.answer(), explain, as_json)
    else:
        show(pipeline, stream_answer(step), explain, as_json, streamed=True)


@app.command(name="eval")
def eval_(
    dataset: Annotated[Path, typer.Option(help="BEIR folder, or a question set (.yaml/.jsonl)")],
    split: Annotated[str, typer.Option(help="BEIR split")] = "test",
    level: Annotated[str, typer.Option(help="auto | record | chunk | document")] = "auto",
    variants: Annotated[Optional[str], typer.Option(help="comma-separated, e.g. bm25,hybrid,hybrid+rerank(rrf)")] = None,
    baseline: Annotated[str, typer.Option(help="variant the others are compared with")] = "hybrid",
    out: Annotated[Path, typer.Option(help="where results.json, report.md and metrics.png go")] = Path("eval-out"),
    limit: Annotated[Optional[int], typer.Option(help="only the first N queries")] = None,
    corpus_sample: Annotated[Optional[int], typer.Option(help="index judged records + N others only")] = None,
    documents: Annotated[Optional[list[Path]], typer.Option(help="documents for a JSONL question set")] = None,
    depth: Annotated[int, typer.Option(help="ranking depth evaluated (recall@100 needs 100)")] = 100,
    fail_if_worse_than: Annotated[Optional[str], typer.Option(help="gate: exit 1 if a VARIANT+... variant loses to VARIANT")] = None,
    max_hurt: Annotated[Optional[int], typer.Option(help="gate: also fail when a variant hurts more than N queries")] = None,
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: Annotated[Optional[str], typer.Option(help="second-stage backend for the rerank variants")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="fail when queries or judgments had to be left out")] = False,
) -> None:
    """Evaluate pipeline variants side by side, query by query; optionally gate on a baseline."""
    from funnel.apps.eval_command import EvalOptions, run_eval_command

    settings = settings_from(index=index, embedder=embedder, reranker=reranker)
    options = EvalOptions(
        dataset=dataset, split=split, level=level, variants=variants, baseline=fail_if_worse_than or baseline,
        out=out, limit=limit, corpus_sample=corpus_sample, documents=tuple(documents) if documents else documents,
        depth=depth, index_given=index is not None, max_hurt=max_hurt, gate=fail_if_worse_than is not None,
        strict=strict,
    )
    try:
        failures = run_eval_command(settings, options, out_console(), err)
    except KeyboardInterrupt:
        StopOnce("interrupted").say()
        raise typer.Exit(130) from None
    if failures:
        for failure in failures:
            err.print(styled("gate:", "red", failure))
        raise typer.Exit(1)
