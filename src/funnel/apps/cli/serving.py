"""`funnel serve` (the HTTP API and web page) and `funnel mcp`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from funnel.apps.cli.common import LLM_HELP, EmbedderOpt, IndexOpt, RerankerOpt, app, err, settings_from, styled
from funnel.errors import ConfigError
from funnel.index import location_label

DATABASE_HELP = "keep the service's state in this PostgreSQL, shared by all processes \\[env FUNNEL_DATABASE__URL]"


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port", min=1, max=65535)] = 8000,
    reranker: RerankerOpt = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="collections: indexes and uploads \\[env FUNNEL_SERVE__DATA_DIR]")] = None,
    embedder: EmbedderOpt = None,
    llm: Annotated[Optional[str], typer.Option(help=LLM_HELP)] = None,
    watch: Annotated[
        Optional[list[Path]], typer.Option("--watch", help="a folder kept in sync with a collection (repeatable)")
    ] = None,
    watch_collection: Annotated[
        Optional[str], typer.Option(help="the watched folder's collection \\[default: the folder's name]")
    ] = None,
    database: Annotated[Optional[str], typer.Option(help=DATABASE_HELP)] = None,
    search_database: Annotated[Optional[str], typer.Option(
        help="a streaming read replica of --database, where searches read the indexes \\[env FUNNEL_DATABASE__SEARCH_URL]"
    )] = None,
    workers: Annotated[int, typer.Option(help="HTTP processes sharing the port (needs --database)", min=1, max=64)] = 1,
) -> None:
    """Serve the HTTP API and web page: collections, upload, search, ask (SSE), rerank; docs at /docs.
    With --watch DIR, a collection follows the folder: edits, renames and deletes are synced as they happen.
    With --database, every piece of state is in that PostgreSQL: run several servers and workers on it."""
    import uvicorn  # here, so the other commands do not pay for importing the web stack

    from funnel.apps.api import create_app, uvicorn_options
    from funnel.apps.api.watched import watch_specs

    flags = {"reranker": reranker, "data_dir": data_dir, "embedder": embedder, "llm": llm, "database": database,
             "search_database": search_database}
    settings = settings_from(**flags)
    specs = watch_specs(watch or [], watch_collection)
    if workers > 1:
        _serve_processes(settings, flags, workers, host, port, bool(specs))
        return
    api = create_app(settings, watch=specs)
    if api.state.reranker is not None and hasattr(api.state.reranker, "warm_up"):
        api.state.reranker.warm_up()  # a broken model fails here, in one line, not inside uvicorn
    warning = exposure_warning(host, settings.serve.api_key is not None or _has_keys(api))
    if warning:
        err.print(styled("warning:", "yellow", warning))
    log_level = "info" if logging.getLogger().isEnabledFor(logging.INFO) else "warning"
    served = api.state.reranker.name if api.state.reranker else "none"  # name: a URL without credentials
    answers = api.state.chat.name if api.state.chat else "extractive"
    err.print(
        f"funnel serving on http://{host}:{port} (reranker: {served}, answers: {answers}, "
        f"data: {state_label(settings)}); docs at /docs"
    )
    for spec in specs:
        err.print(f"watching {spec.folder} as collection {spec.name!r}")
    uvicorn.run(api, host=host, port=port, log_level=log_level, **uvicorn_options())


def _has_keys(api) -> bool:
    """Whether keys made by `funnel keys create` guard the service (a store that cannot be read: it fails
    closed, so the port is not open either)."""
    from funnel.errors import FunnelError

    try:
        return api.state.keys.active()
    except FunnelError:
        return True


def state_label(settings) -> str:
    """Where the service keeps its state, without a password."""
    if settings.database.url is None:
        return str(settings.serve.data_dir)
    from funnel.apps.state.db import url_label

    label = url_label(settings.database.url.get_secret_value())
    if settings.database.search_url is not None:
        label += f", searches on the replica {url_label(settings.database.search_url.get_secret_value())}"
    return label


def _serve_processes(settings, flags: dict, workers: int, host: str, port: int, watching: bool) -> None:
    """`--workers N`: N uvicorn processes on one port, each building its app from the environment."""
    import os

    import uvicorn

    from funnel.apps.api import uvicorn_options
    from funnel.apps.settings import env_var

    if settings.database.url is None:
        raise ConfigError("--workers N runs N processes, which share state only through a database: add "
                          "--database postgresql://... (or FUNNEL_DATABASE__URL)")
    if watching:
        raise ConfigError("--watch follows a folder from one process; drop --workers")
    for name, value in flags.items():  # the processes read the flags as their environment
        if value is not None:
            os.environ[env_var(name)] = str(value)
    if exposure_warning(host, settings.serve.api_key is not None):
        err.print(styled("warning:", "yellow", exposure_warning(host, settings.serve.api_key is not None)))
    err.print(f"funnel serving on http://{host}:{port} with {workers} processes (data: {state_label(settings)}); "
              "docs at /docs")
    log_level = "info" if logging.getLogger().isEnabledFor(logging.INFO) else "warning"
    uvicorn.run("funnel.apps.api:app_from_environment", factory=True, workers=workers, host=host, port=port,
                log_level=log_level, **uvicorn_options())


@app.command()
def worker(
    database: Annotated[Optional[str], typer.Option(help=DATABASE_HELP)] = None,
    threads: Annotated[int, typer.Option(help="jobs run at once (one per collection at most)", min=1, max=64)] = 2,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
    llm: Annotated[Optional[str], typer.Option(help=f"{LLM_HELP} (triage's analysis)")] = None,
) -> None:
    """Run the service's jobs (ingests, deletes, calibrations, and triage's analyses and Slack messages when
    FUNNEL_TRIAGE__REPO names the repository) from the database's queue, beside or instead of `funnel serve`'s own
    threads, until Ctrl-C or SIGTERM. A job this worker leaves half-done goes back to the queue for another."""
    settings = settings_from(database=database, embedder=embedder, reranker=reranker, llm=llm)
    if settings.database.url is None:
        raise ConfigError("funnel worker takes its jobs from the service database: give --database "
                          "postgresql://... (or FUNNEL_DATABASE__URL)")
    library, triage = worker_library(settings, threads)
    doing = f" and triage of {settings.triage.repo}" if triage is not None else ""
    err.print(f"funnel worker: {threads} threads on {library.home.db.label}{doing} (Ctrl-C stops)")
    _run_until_stopped(library.close)


def worker_library(settings, threads: int):
    """`funnel worker`'s collections and job threads, and its triage when `settings.triage.repo` configures one
    (its repository indexed first, as `funnel serve` does at start-up)."""
    from funnel.apps.api import services_for
    from funnel.apps.api.library import open_database, open_library
    from funnel.apps.factory import build_chat, reranker_from_settings
    from funnel.apps.triage.build import build_triage, queued_triage

    reranker, chat, db = reranker_from_settings(settings), build_chat(settings), open_database(settings)
    service = None
    if settings.triage.repo is not None:
        service = build_triage(settings, reranker=reranker, chat=chat, db=db)
        service.pipeline.ingest([settings.triage.repo])  # before its first job: the analysis reads the index
    library = open_library(settings, services_for(settings, reranker, chat), workers=threads, db=db)
    return library, queued_triage(settings, library, service)


def _run_until_stopped(close) -> None:
    """Until SIGTERM (exit 0) or Ctrl-C (exit 130); then `close`, which hands running jobs back."""
    import signal
    import threading

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        while not stopped.wait(0.5):
            pass
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        err.print("interrupted: handing running jobs back to the queue")
        close()
        raise typer.Exit(130) from None
    err.print("stopping: handing running jobs back to the queue")
    close()


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
        "documents; set FUNNEL_SERVE__API_KEY (or api_key in funnel.toml), or make keys with `funnel keys create`"
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
    repo: Annotated[Optional[Path], typer.Option(help="triage: the repository root \\[env FUNNEL_TRIAGE__REPO]")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(help="funnel serve's collections \\[env FUNNEL_SERVE__DATA_DIR]")] = None,
) -> None:
    """Serve search, ask, get_document, list_collections and triage to MCP clients (desktop agents), over
    stdio, or streamable HTTP with --http. Models load on the first tool call."""
    from funnel.errors import missing_dependency

    settings = settings_from(index=index, embedder=embedder, reranker=reranker, llm=llm, repo=repo, data_dir=data_dir)
    try:
        from funnel.integrations.mcp import run as run_mcp
    except ImportError as e:
        if not (e.name or "").startswith("mcp"):  # the SDK (mcp, mcp_types) is missing, not a part of funnel
            raise
        raise missing_dependency("funnel mcp", "mcp", "mcp") from None
    if settings.triage.repo is not None and not settings.triage.repo.is_dir():
        raise ConfigError(f"the repository {settings.triage.repo} is not a directory")
    if http and exposure_warning(host, has_api_key=False):
        err.print(styled("warning:", "yellow", f"listening on {host}: the MCP endpoint has no authentication; "
                                               "anyone who can reach this port can search these documents"))
    where = f"http://{host}:{port}/mcp" if http else "stdio"
    err.print(f"funnel mcp on {where} (index: {location_label(settings.index)})")  # stderr: stdout is the protocol's
    run_mcp(settings, http=http, host=host, port=port)
