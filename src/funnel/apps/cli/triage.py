"""`funnel triage` and `funnel incidents`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from funnel.apps.cli.common import LLM_HELP, IndexOpt, JsonOpt, RerankerOpt, StopOnce, app, err, out, settings_from
from funnel.errors import ConfigError


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
    settings = settings_from(index=index, repo=repo, llm=llm, reranker=reranker)
    try:
        if settings.triage.repo is not None and not settings.triage.repo.is_dir():
            raise ConfigError(f"the repository {settings.triage.repo} is not a directory")
        text = read_trace(trace)
        if not text.strip() and not message.strip():
            raise ConfigError("the trace is empty; give a trace or --message")
        if settings.triage.repo is not None:
            ingest_repo(settings, err)
        outcome = run_triage(settings, text, message, service, slack)
    except KeyboardInterrupt:
        StopOnce("interrupted").say()
        raise typer.Exit(130) from None
    print_outcome(outcome, out, err, as_json)


@app.command()
def incidents(
    limit: Annotated[int, typer.Option(help="newest N", min=1, max=10000)] = 20,
    service: Annotated[Optional[str], typer.Option(help="only this service")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List recorded triage incidents, newest first."""
    from funnel.apps.triage.commands import print_incidents

    settings = settings_from()
    print_incidents(settings, limit, service, out, as_json)
