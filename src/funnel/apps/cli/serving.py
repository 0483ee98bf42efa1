"""`funnel serve` (the HTTP API and web page) and `funnel mcp`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from funnel.apps.cli.common import LLM_HELP, EmbedderOpt, IndexOpt, RerankerOpt, app, err, settings_from, styled
from funnel.errors import ConfigError
from funnel.index import location_label


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

    settings = settings_from(reranker=reranker, data_dir=data_dir, embedder=embedder, llm=llm)
    specs = watch_specs(watch or [], watch_collection)
    api = create_app(settings, watch=specs)
    if api.state.reranker is not None and hasattr(api.state.reranker, "warm_up"):
        api.state.reranker.warm_up()  # a broken model fails here, in one line, not inside uvicorn
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

    settings = settings_from(index=index, embedder=embedder, reranker=reranker, llm=llm, repo=repo, data_dir=data_dir)
    try:
        from funnel.integrations.mcp import run as run_mcp
    except ImportError as e:
        if not (e.name or "").startswith("mcp"):  # the SDK (mcp, mcp_types) is missing, not a part of funnel
            raise
        raise missing_dependency("funnel mcp", "mcp", "mcp") from None
    if settings.repo is not None and not settings.repo.is_dir():
        raise ConfigError(f"the repository {settings.repo} is not a directory")
    if http and exposure_warning(host, has_api_key=False):
        err.print(styled("warning:", "yellow", f"listening on {host}: the MCP endpoint has no authentication; "
                                               "anyone who can reach this port can search these documents"))
    where = f"http://{host}:{port}/mcp" if http else "stdio"
    err.print(f"funnel mcp on {where} (index: {location_label(settings.index)})")  # stderr: stdout is the protocol's
    run_mcp(settings, http=http, host=host, port=port)
