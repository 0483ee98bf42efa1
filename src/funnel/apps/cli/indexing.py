"""`funnel ingest` (with --watch) and `funnel calibrate`: the commands that change an index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from funnel.apps.cli.common import (
    EmbedderOpt, IndexOpt, JsonOpt, RerankerOpt, StopOnce, app, err, fail, out, settings_from, styled,
)
from funnel.apps.cli.output import print_calibration
from funnel import analyze
from funnel.apps.factory import build_pipeline
from funnel.errors import ConfigError, FunnelError
from funnel.index import location_label
from funnel.ingest.loaders import LOADERS


@app.command()
def ingest(
    paths: Annotated[
        list[str], typer.Argument(help=f"files and folders ({', '.join(loader.label for loader in LOADERS)})")
    ],
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    analyzer: Annotated[
        Optional[str], typer.Option(help=f"BM25 analysis of a new index: {' | '.join(analyze.names())}")
    ] = None,
    calibrate: Annotated[
        bool, typer.Option("--calibrate/--no-calibrate", help="measure the reranker on the new index afterwards")
    ] = True,
    watch: Annotated[
        bool, typer.Option("--watch", help="then keep the index in sync with the paths until Ctrl-C")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Add or update documents. Unchanged files are skipped; files removed from a folder leave the index.
    Then, when the index changed (or was never calibrated), calibrate it: the first stage's weights, and the
    reranker's say when one is configured.
    With --watch, ingest again (incrementally) after every burst of changes. The summary counts the files no
    loader takes by extension (ignored folders and files aside); --json prints it as JSON."""
    if any(not p.strip() for p in paths):
        raise ConfigError("an empty path was given; name files or folders to ingest")
    if as_json and watch:
        raise ConfigError("--json prints one ingest's report; it does not go with --watch")
    settings = settings_from(index=index, embedder=embedder, reranker=reranker, analyzer=analyzer)
    stop = StopOnce("interrupted: stopping; the index keeps the last ingest that completed")
    try:
        with stop:
            pipeline = build_pipeline(settings)
            with Progress(
                TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[document]}"), console=err, transient=True, disable=not err.is_terminal,
            ) as bar:
                task = bar.add_task("ingest", total=None, document="")

                def pages(path: str, read: int, total: int) -> None:  # a long PDF shows how far it is
                    bar.update(task, document=f"{path} p.{read}/{total}" if read < total else "")

                report = pipeline.ingest(
                    [Path(p) for p in paths],
                    progress=lambda done, total: bar.update(task, completed=done, total=total), pages=pages,
                )
    except KeyboardInterrupt:
        stop.say()
        raise typer.Exit(130) from None
    _summary(report, location_label(settings.index), as_json)
    changed = report.added or report.updated or report.removed
    if calibrate and (changed or pipeline.calibration_problem() is not None):
        _calibrate(pipeline, after_ingest=True, say=err if as_json else None)
    if watch:
        _watch(pipeline, paths, settings.index, {str(p) for p in report.problems})
    if report.problems:
        raise typer.Exit(1)


def _summary(report, index: str, as_json: bool) -> None:
    """Every file accounted for: each skipped one with its reason, the counts, then the files no loader
    takes, by extension (standard output is the JSON alone under --json)."""
    if as_json:
        out.print_json(json.dumps({**report.to_json(), "index": index}))
        return
    for problem in report.problems:
        err.print(styled("skipped", "yellow", str(problem)))
    for path, warning in report.warnings:
        err.print(styled("warning", "yellow", f"{path}: {warning}"))
    out.print(
        f"{report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.removed} removed, {len(report.problems)} skipped; {report.chunks} chunks embedded "
        f"in {report.seconds:.1f}s ({report.chunks_per_second:.0f} chunks/s) -> {index}",
        highlight=False,
    )
    if report.unsupported:
        out.print(report.not_documents(), highlight=False)


def _watch(pipeline, paths: list[str], index: str, said: set[str]) -> None:
    """`ingest --watch`: the same incremental ingest after every burst of changes, until Ctrl-C (130).
    A problem (an unreadable file) is said when it appears, not again at every sync."""
    from funnel.apps.watch import FolderWatcher, describe

    def sync() -> None:
        report = pipeline.ingest([Path(p) for p in paths])
        problems = {str(p) for p in report.problems}
        for problem in sorted(problems - said):
            err.print(styled("skipped", "yellow", problem))
        said.intersection_update(problems)
        said.update(problems)
        if report.added or report.updated or report.removed:
            out.print(f"synced: {describe(report)} in {report.seconds:.1f}s")

    def failed(e: Exception) -> None:
        err.print(styled("error:", "red", f"{e} (the index keeps the last sync; trying again)"))

    local_index = [] if "://" in index else [Path(index)]
    stop = StopOnce("interrupted: stopped watching; the index keeps the last ingest that completed")
    out.print(f"watching {', '.join(paths)} for changes (Ctrl-C stops)")
    try:
        with stop:
            FolderWatcher([Path(p) for p in paths], sync, ignore=local_index, told=failed).run()
    except KeyboardInterrupt:
        stop.say()
        raise typer.Exit(130) from None


def _calibrate(pipeline, n_queries: int | None = None, after_ingest: bool = False, judged=None,
               generated: bool = False, say=None):
    """Calibrate with a progress bar, and say the choice on `say` (default: standard output). After an ingest
    a failure (the reranker's server down, say) is a warning: the ingest itself succeeded and `auto` keeps the
    previous choice or the first stage."""
    from funnel.calibrate import DEFAULT_QUERIES

    stop = StopOnce("interrupted: stopping; the previous calibration is kept")
    try:
        with stop, Progress(
            TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=err, transient=True, disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task("calibrate", total=None)
            result = pipeline.calibrate(
                n_queries or DEFAULT_QUERIES, progress=lambda done, total: bar.update(task, completed=done, total=total),
                judged=judged, generated=generated,
            )
    except KeyboardInterrupt:
        stop.say()
        raise typer.Exit(130) from None
    except FunnelError as e:
        if not after_ingest:
            fail(e)
        err.print(styled("warning:", "yellow", f"{e} (run `funnel calibrate` again later)"))
        return None
    (say or out).print(f"calibrated ({result.seconds:.0f}s): first stage {result.first_stage}"
                       + (f" — {result.first_stage_reason}" if result.first_stage_reason else "")
                       + f"; second stage {result.option} — {result.reason}")
    return result


@app.command(name="calibrate")
def calibrate_(
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    queries: Annotated[
        Optional[int], typer.Option(help="test queries to make from the documents (default 120)", min=1, max=5000)
    ] = None,
    judged: Annotated[
        Optional[Path],
        typer.Option(help="real queries with their answers instead: JSON Lines, one "
                          '{"query": ..., "relevant": list of document ids or paths} per line; kept for later '
                          "recalibrations"),
    ] = None,
    generated: Annotated[
        bool, typer.Option("--generated", help="queries made from the documents, even if judged ones are stored")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure whether the reranker helps on this index, with queries made from its own documents (or your
    judged ones), and store the choice (policy and weight) with the index; `--policy auto` (the default)
    then uses it. A calibration made with judged queries measures them again the next time."""
    from funnel.calibrate import read_judged

    if judged is not None and (generated or queries is not None):
        raise ConfigError("--judged measures on your queries; it does not go with --generated or --queries")
    judged_queries = read_judged(judged) if judged is not None else None
    settings = settings_from(index=index, embedder=embedder, reranker=reranker)
    pipeline = build_pipeline(settings)
    # With --json, standard output is the JSON alone.
    result = _calibrate(pipeline, queries, judged=judged_queries, generated=generated,
                        say=err if as_json else None)
    if as_json:
        out.print_json(json.dumps(result.to_json()))
        return
    print_calibration(result)
