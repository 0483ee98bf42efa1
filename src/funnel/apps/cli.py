"""`funnel` command line. Errors become one line on stderr and an exit code; no tracebacks.

Exit codes: 0 ok; 1 ingest finished but some sources were skipped; 2 bad argument or setting;
3 backend unavailable; 5 index problem; 130 interrupted (the index is left as it was).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from funnel import embed, generate, rerank
from funnel.apps.factory import build_pipeline
from funnel.apps.settings import load_settings
from funnel.errors import ConfigError, FunnelError
from funnel.index import location_label
from funnel.types import Answer, SearchResult

try:  # typer >= 0.24 vendors click; older releases use the click package
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

app = typer.Typer(add_completion=False, no_args_is_help=True, help="funnel: two-stage retrieval you can trust.")
# Piped output gets a wide fixed width, so tables are not squeezed to 80 columns in logs.
# markup=False: document text, paths and error messages are printed as they are ("[/x]" in a code
# chunk is not a style tag). Styles are added with Text objects only.
out = Console(soft_wrap=True, markup=False, highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False, width=None if sys.stderr.isatty() else 160)


def styled(label: str, style: str, rest: str) -> Text:
    return Text.assemble((label, style), " ", rest)

IndexOpt = Annotated[
    Optional[str], typer.Option("--index", help="index directory or postgresql:// URL [env FUNNEL_INDEX]")
]
EmbedderOpt = Annotated[Optional[str], typer.Option(help=embed.REGISTRY.help())]
KOpt = Annotated[Optional[int], typer.Option("--k", "-k", help="documents to return")]
PolicyOpt = Annotated[Optional[str], typer.Option(help="none | replace | guaranteed_slots | rrf")]
RetrievalOpt = Annotated[Optional[str], typer.Option(help="hybrid | bm25 | dense")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
RerankerOpt = Annotated[Optional[str], typer.Option(help=rerank.REGISTRY.help())]
LLM_HELP = generate.REGISTRY.help()


def _fail(e: FunnelError) -> None:
    err.print(styled("error:", "red", str(e)))
    raise typer.Exit(e.exit_code)


class _StopOnce:
    """A context in which the first Ctrl-C says `message` and stops the command (KeyboardInterrupt, so
    transactions roll back), and later ones are ignored until the process ends. A second
    KeyboardInterrupt would cut the rollback short, and leave onnxruntime's or Lance's native threads
    running into interpreter shutdown: a C++ abort ("terminate called without an active exception")."""

    said_any = False  # by any instance: run() says "interrupted" when typer turned a Ctrl-C into exit 130

    def __init__(self, message: str):
        self.message = message
        self.said = False
        self._previous = self._previous_hook = None

    def say(self) -> None:
        """The message, once (a Ctrl-C just before the handler was set is said by the caller)."""
        if not self.said:
            self.said = _StopOnce.said_any = True
            err.print(self.message)

    def _first(self, signum, frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.say()
        # A LanceDB call cut short leaves its coroutine unawaited; Python would warn at exit.
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        raise KeyboardInterrupt

    def _dropped(self, unraisable) -> None:
        # Python prints and drops a KeyboardInterrupt raised while a finalizer (a weakref callback, a
        # __del__) runs: deliver it again, or that Ctrl-C would stop nothing and ignore the next ones.
        # From another thread, a moment later: raised now, it would land in this hook and be dropped too.
        if unraisable.exc_type is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._first)
            again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
            again.daemon = True
            again.start()
        else:
            self._previous_hook(unraisable)

    def __enter__(self) -> _StopOnce:
        # Signals can only be set in the main thread; an ignored SIGINT (a background job) stays ignored.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) not in (
            signal.SIG_IGN, None
        ):
            self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._dropped
            self._previous = signal.signal(signal.SIGINT, self._first)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is None:
            return
        sys.unraisablehook = self._previous_hook
        if signal.getsignal(signal.SIGINT) == self._first:  # not interrupted: back to normal
            signal.signal(signal.SIGINT, self._previous)


def _settings(**flags):
    try:
        return load_settings(**flags)
    except FunnelError as e:
        _fail(e)


def _print_version(value: bool) -> None:
    if value:
        import funnel

        out.print(f"funnel {funnel.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log details")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    level = logging.INFO if verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # psycopg gives its logger a level of its own (WARNING) unless one is set: say only errors here too
    # (a Ctrl-C mid-query otherwise adds "error ignored in rollback" lines).
    logging.getLogger("psycopg").setLevel(level)


@app.command()
def ingest(
    paths: Annotated[list[str], typer.Argument(help="files and folders (PDF, Markdown, text, code)")],
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    calibrate: Annotated[
        bool, typer.Option("--calibrate/--no-calibrate", help="measure the reranker on the new index afterwards")
    ] = True,
    watch: Annotated[
        bool, typer.Option("--watch", help="then keep the index in sync with the paths until Ctrl-C")
    ] = False,
) -> None:
    """Add or update documents. Unchanged files are skipped; files removed from a folder leave the index.
    Then, when the index changed (or was never calibrated) and a reranker is configured, calibrate it.
    With --watch, ingest again (incrementally) after every burst of changes."""
    if any(not p.strip() for p in paths):
        _fail(ConfigError("an empty path was given; name files or folders to ingest"))
    settings = _settings(index=index, embedder=embedder, reranker=reranker)
    stop = _StopOnce("interrupted: stopping; the index keeps the last ingest that completed")
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
    except FunnelError as e:
        _fail(e)
    for problem in report.problems:
        err.print(styled("skipped", "yellow", str(problem)))
    out.print(
        f"{report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
        f"{report.removed} removed, {len(report.problems)} skipped; {report.chunks} chunks embedded "
        f"in {report.seconds:.1f}s ({report.chunks_per_second:.0f} chunks/s) -> {location_label(settings.index)}",
        highlight=False,
    )
    if calibrate and pipeline.reranker is not None and (report.added or report.updated or report.removed
                                                        or pipeline.calibration_problem() is not None):
        _calibrate(pipeline, after_ingest=True)
    if watch:
        _watch(pipeline, paths, settings.index, {str(p) for p in report.problems})
    if report.problems:
        raise typer.Exit(1)


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
    stop = _StopOnce("interrupted: stopped watching; the index keeps the last ingest that completed")
    out.print(f"watching {', '.join(paths)} for changes (Ctrl-C stops)")
    try:
        with stop:
            FolderWatcher([Path(p) for p in paths], sync, ignore=local_index, told=failed).run()
    except KeyboardInterrupt:
        stop.say()
        raise typer.Exit(130) from None


def _calibrate(pipeline, n_queries: int | None = None, after_ingest: bool = False):
    """Calibrate with a progress bar. After an ingest a failure (the reranker's server down, say) is a warning:
    the ingest itself succeeded and `auto` keeps the previous choice or the first stage."""
    from funnel.calibrate import DEFAULT_QUERIES

    stop = _StopOnce("interrupted: stopping; the previous calibration is kept")
    try:
        with stop, Progress(
            TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=err, transient=True, disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task("calibrate", total=None)
            result = pipeline.calibrate(
                n_queries or DEFAULT_QUERIES, progress=lambda done, total: bar.update(task, completed=done, total=total)
            )
    except KeyboardInterrupt:
        stop.say()
        raise typer.Exit(130) from None
    except FunnelError as e:
        if not after_ingest:
            _fail(e)
        err.print(styled("warning:", "yellow", f"{e} (run `funnel calibrate` again later)"))
        return None
    out.print(f"calibrated ({result.seconds:.0f}s): second stage {result.option} — {result.reason}")
    return result


@app.command(name="calibrate")
def calibrate_(
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    queries: Annotated[
        Optional[int], typer.Option(help="test queries to make from the documents [default: 120]", min=1, max=5000)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure whether the reranker helps on this index, with queries made from its own documents, and
    store the choice (policy and weight) with the index; `--policy auto` (the default) then uses it."""
    settings = _settings(index=index, embedder=embedder, reranker=reranker)
    try:
        pipeline = build_pipeline(settings)
        if pipeline.reranker is None:
            raise ConfigError("no reranker is configured (reranker = none): there is nothing to calibrate")
    except FunnelError as e:
        _fail(e)
    result = _calibrate(pipeline, queries)
    if as_json:
        out.print_json(json.dumps(result.to_json()))
        return
    _print_calibration(result)


def _print_calibration(result) -> None:
    table = Table(title=f"MRR@10 on {result.queries} queries made from the index", title_justify="left")
    table.add_column("option")
    kinds = sorted(result.mrr_by_kind)
    for column in ("all", *kinds):
        table.add_column(column, justify="right")
    for name, value in result.mrr.items():
        marker = " (chosen)" if name == result.option else ""
        table.add_row(name + marker, f"{value:.4f}", *[f"{result.mrr_by_kind[k][name]:.4f}" for k in kinds])
    out.print(table)
    out.print(f"answer in the first-stage window: {result.window_recall:.0%} of the queries; "
              f"reranker {result.reranker}, embedder {result.embedder}")


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
    as_json: JsonOpt = False,
) -> None:
    """Retrieve the top documents for a query."""
    settings = _settings(index=index, embedder=embedder, k=k, policy=policy, retrieval=retrieval, reranker=reranker)
    try:
        pipeline = build_pipeline(settings)
        result = pipeline.search(query)
    except FunnelError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(_result_json(result)))
        return
    _print_documents(result)
    if explain:
        _print_explain(result)
        _print_calibration_note(pipeline)


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
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the documents, with numbered citations."""
    settings = _settings(index=index, embedder=embedder, k=k, policy=policy, reranker=reranker, llm=llm)
    try:
        pipeline = build_pipeline(settings)
        answer = pipeline.ask(question)
    except FunnelError as e:
        _fail(e)
    if as_json:
        out.print_json(json.dumps(_answer_json(answer)))
        return
    _print_answer(answer)
    if explain and answer.search is not None:
        _print_explain(answer.search)
        _print_calibration_note(pipeline)


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
    from funnel.apps.eval_command import run_eval_command

    settings = _settings(index=index, embedder=embedder, reranker=reranker)
    try:
        failures = run_eval_command(
            settings, dataset, split, level, variants, fail_if_worse_than or baseline, out, limit,
            corpus_sample, documents, depth, index is not None, max_hurt, gate=fail_if_worse_than is not None,
            console=out_console(), err_console=err, strict=strict,
        )
    except KeyboardInterrupt:
        _StopOnce("interrupted").say()
        raise typer.Exit(130) from None
    except FunnelError as e:
        _fail(e)
    if failures:
        for failure in failures:
            err.print(styled("gate:", "red", failure))
        raise typer.Exit(1)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port", min=1, max=65535)] = 8000,
    reranker: RerankerOpt = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="collections: indexes and uploads [env FUNNEL_DATA_DIR]")] = None,
    embedder: EmbedderOpt = None,
    llm: Annotated[Optional[str], typer.Option(help=LLM_HELP)] = None,
    watch: Annotated[
        Optional[list[Path]], typer.Option("--watch", help="a folder kept in sync with a collection (repeatable)")
    ] = None,
    watch_collection: Annotated[
        Optional[str], typer.Option(help="the watched folder's collection [default: the folder's name]")
    ] = None,
) -> None:
    """Serve the HTTP API and web page: collections, upload, search, ask (SSE), rerank; docs at /docs.
    With --watch DIR, a collection follows the folder: edits, renames and deletes are synced as they happen."""
    import uvicorn  # here, so the other commands do not pay for importing the web stack

    from funnel.apps.api import create_app
    from funnel.apps.api.watched import watch_specs

    settings = _settings(reranker=reranker, data_dir=data_dir, embedder=embedder, llm=llm)
    try:
        specs = watch_specs(watch or [], watch_collection)
        api = create_app(settings, watch=specs)
        if api.state.reranker is not None and hasattr(api.state.reranker, "warm_up"):
            api.state.reranker.warm_up()  # a broken model fails here, in one line, not inside uvicorn
    except FunnelError as e:
        _fail(e)
    warning = exposure_warning(host, settings.api_key is not None)
    if warning:
        err.print(styled("warning:", "yellow", warning))
    log_level = "info" if logging.getLogger().isEnabledFor(logging.INFO) else "warning"
    served = api.state.reranker.name if api.state.reranker else "none"  # name: a URL without credentials
    answers = api.state.chat.name if api.state.chat else "extractive"
    err.print(
        f"funnel serving on http://{host}:{port} (reranker: {served}, answers: {answers}, "
        f"data: {settings.data_dir}); docs at /docs"
    )
    for spec in specs:
        err.print(f"watching {spec.folder} as collection {spec.name!r}")
    uvicorn.run(api, host=host, port=port, log_level=log_level)


def exposure_warning(host: str, has_api_key: bool) -> str | None:
    """A warning when the server listens beyond this machine with no API key, else None."""
    import ipaddress

    if has_api_key:
        return None
    name = host.strip("[]")
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    if loopback:
        return None
    return (
        f"listening on {host} with no api_key: anyone who can reach this port can read, upload and delete "
        "documents; set FUNNEL_API_KEY (or api_key in funnel.toml)"
    )


@app.command(name="mcp")
def mcp_(
    http: Annotated[bool, typer.Option("--http", help="serve streamable HTTP at http://HOST:PORT/mcp, not stdio")] = False,
    host: Annotated[str, typer.Option(help="--http: interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--http: TCP port", min=1, max=65535)] = 8765,
    index: IndexOpt = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    llm: Annotated[Optional[str], typer.Option(help=f"{LLM_HELP} (default: extractive)")] = None,
    repo: Annotated[Optional[Path], typer.Option(help="triage: the repository root [env FUNNEL_REPO]")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="funnel serve's collections [env FUNNEL_DATA_DIR]")] = None,
) -> None:
    """Serve search, ask, get_document, list_collections and triage to MCP clients (desktop agents), over
    stdio, or streamable HTTP with --http. Models load on the first tool call."""
    from funnel.errors import missing_dependency

    settings = _settings(index=index, embedder=embedder, reranker=reranker, llm=llm, repo=repo, data_dir=data_dir)
    try:
        from funnel.integrations.mcp import run as run_mcp
    except ImportError as e:
        if not (e.name or "").startswith("mcp"):  # the SDK (mcp, mcp_types) is missing, not a part of funnel
            raise
        _fail(missing_dependency("funnel mcp", "mcp", "mcp"))
    if settings.repo is not None and not settings.repo.is_dir():
        _fail(ConfigError(f"the repository {settings.repo} is not a directory"))
    if http and exposure_warning(host, has_api_key=False):
        err.print(styled("warning:", "yellow", f"listening on {host}: the MCP endpoint has no authentication; "
                                               "anyone who can reach this port can search these documents"))
    where = f"http://{host}:{port}/mcp" if http else "stdio"
    err.print(f"funnel mcp on {where} (index: {location_label(settings.index)})")  # stderr: stdout is the protocol's
    run_mcp(settings, http=http, host=host, port=port)


@app.command()
def triage(
    trace: Annotated[Optional[str], typer.Argument(help="file with the stack trace; - or nothing reads stdin")] = None,
    repo: Annotated[Optional[Path], typer.Option(help="repository root: indexed (incrementally) first")] = None,
    index: IndexOpt = None,
    message: Annotated[str, typer.Option(help="the error message, when the trace does not carry it")] = "",
    service: Annotated[str, typer.Option(help="the service that failed")] = "cli",
    llm: Annotated[Optional[str], typer.Option(help=LLM_HELP)] = None,
    reranker: RerankerOpt = None,
    slack: Annotated[bool, typer.Option("--slack/--no-slack", help="post to the configured Slack webhook")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Rank a repository's files for an error (stack trace), analyse them with an LLM if one is configured,
    record the incident and post it to Slack if a webhook is configured."""
    from funnel.apps.triage.build import default_repo_index
    from funnel.apps.triage.commands import ingest_repo, print_outcome, read_trace, run_triage

    if index is None and repo is not None and "FUNNEL_INDEX" not in os.environ:
        index = default_repo_index(repo)
    settings = _settings(index=index, repo=repo, llm=llm, reranker=reranker)
    try:
        if settings.repo is not None and not settings.repo.is_dir():
            raise ConfigError(f"the repository {settings.repo} is not a directory")
        text = read_trace(trace)
        if not text.strip() and not message.strip():
            raise ConfigError("the trace is empty; give a trace or --message")
        if settings.repo is not None:
            ingest_repo(settings, err)
        outcome = run_triage(settings, text, message, service, slack)
    except KeyboardInterrupt:
        _StopOnce("interrupted").say()
        raise typer.Exit(130) from None
    except FunnelError as e:
        _fail(e)
    print_outcome(outcome, out, err, as_json)


@app.command()
def incidents(
    limit: Annotated[int, typer.Option(help="newest N", min=1, max=10000)] = 20,
    service: Annotated[Optional[str], typer.Option(help="only this service")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List recorded triage incidents, newest first."""
    from funnel.apps.triage.commands import print_incidents

    settings = _settings()
    try:
        print_incidents(settings, limit, service, out, as_json)
    except FunnelError as e:
        _fail(e)


def out_console() -> Console:
    return out


def _print_documents(result: SearchResult) -> None:
    if not result.documents:
        out.print("no matching documents")
    for doc in result.documents:
        best = doc.best.chunk
        out.print(Text.assemble((f"{doc.rank}. {doc.path}", "bold"), f" ({best.location})  score {doc.score:.4f}"))
        snippet = " ".join(best.text.split())
        out.print(f"   {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    _print_status(result)


def _print_status(result: SearchResult) -> None:
    reason = f" ({result.rerank_reason})" if result.rerank_reason else ""
    timing = ", ".join(f"{name} {ms:.0f} ms" for name, ms in result.timings_ms.items())
    err.print(f"rerank: {result.rerank_status.value}{reason}; policy {result.policy}; {timing}")
    for note in result.notes:
        err.print(styled("note:", "yellow", note))


def _print_explain(result: SearchResult) -> None:
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
            c.chunk.location,
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
    return line


def _print_calibration_note(pipeline) -> None:
    """Under --explain: what the index's calibration chose and why (or why there is none)."""
    problem = pipeline.calibration_problem()
    if problem is not None:
        out.print(f"calibration: {problem}")
        return
    c = pipeline.calibration()
    out.print(f"calibration ({c.created}, {c.queries} queries, reranker {c.reranker}): {c.option} — {c.reason}")


def _print_answer(answer: Answer) -> None:
    out.print(styled("Q:", "bold", answer.question))
    out.print(answer.text)
    out.print()
    for c in answer.citations:
        out.print(f"[{c.number}] {c.path} ({c.location})")
    out.print(f"answered by: {answer.generator}", style="dim")
    if answer.fallback_reason:
        err.print(styled("note:", "yellow", f"the LLM did not answer ({answer.fallback_reason})"))
    if answer.flags:
        err.print(styled("flags:", "yellow", ", ".join(answer.flags)))
    if answer.search is not None:
        _print_status(answer.search)


def _result_json(result: SearchResult) -> dict:
    data = asdict(result)
    data["rerank_status"] = result.rerank_status.value
    return json.loads(json.dumps(data, default=str))


def _answer_json(answer: Answer) -> dict:
    return {
        "question": answer.question,
        "answer": answer.text,
        "generator": answer.generator,
        "fallback_reason": answer.fallback_reason,
        "flags": list(answer.flags),
        "citations": [asdict(c) for c in answer.citations],
        "search": _result_json(answer.search) if answer.search else None,
    }


def run() -> None:
    """Console entry point: a user mistake never ends in a traceback; neither does a bug (-v shows it)."""
    try:
        _run()
    finally:
        _quiet_exit()


def _quiet_exit() -> None:
    """From here the command's work is done (committed or rolled back): a Ctrl-C while the interpreter shuts
    down (joining threads, atexit) would print 'Exception ignored ... KeyboardInterrupt' with a traceback;
    it ends the process at once instead, with one line and the usual 130."""
    if threading.current_thread() is not threading.main_thread():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say anyway
            pass
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _exit_now)


def _exit_now(signum, frame) -> None:
    os.write(2, b"interrupted while exiting; the command had finished\n")
    os._exit(130)


def _run() -> None:
    try:
        code = app(standalone_mode=False)  # returns typer.Exit's code instead of raising it
        if code == 130 and not _StopOnce.said_any:  # typer's own answer to a Ctrl-C before a command ran
            err.print("interrupted")
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Abort:
        err.print("interrupted")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except click_exceptions.ClickException as e:  # usage errors: typer/click format them
        e.show()
        sys.exit(2)
    except FunnelError as e:  # raised outside a command body (e.g. while building settings)
        err.print(styled("error:", "red", str(e)))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:
        if logging.getLogger().isEnabledFor(logging.INFO):
            err.print_exception()
        err.print(styled("error:", "red", f"unexpected {type(e).__name__}: {e} (run with -v for details)"))
        sys.exit(70)
