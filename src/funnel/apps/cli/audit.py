"""`funnel audit`: the service's audit log (`funnel.apps.state.audit`), every write and every refused key,
read from the data dir's `audit.sqlite` or, with `--database`, the service's PostgreSQL. Reading only: the
command cannot add, change or remove a row."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from funnel.apps.cli.common import JsonOpt, app, out, settings_from
from funnel.apps.cli.keys import DatabaseOpt, DataDirOpt
from funnel.apps.state.audit import DEFAULT_LIMIT, MAX_LIMIT


@contextmanager
def _store(data_dir: Path | None, database: str | None):
    from funnel.apps.api.library import open_database
    from funnel.apps.state.audit import open_audit

    settings = settings_from(data_dir=data_dir, database=database)
    db = open_database(settings)
    try:
        where = db.label if db is not None else str(settings.serve.data_dir)
        yield open_audit(db, settings.serve.data_dir), where
    finally:
        if db is not None:
            db.close()


def line(row: dict) -> str:
    """One row as `funnel audit` prints it: time, who, action, status, then what and from where."""
    return (f"{row['time']}  {row['who']:<12}  {row['action']:<19}  {row['status']}  "
            f"collection={row['collection'] or '-'}  target={row['target'] or '-'}  client={row['client']}")


@app.command("audit")
def audit(
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIMIT, help="at most this many rows")] = DEFAULT_LIMIT,
    since: Annotated[str | None, typer.Option(
        help="from this time on (ISO 8601, UTC unless it says; or epoch seconds)")] = None,
    data_dir: DataDirOpt = None,
    database: DatabaseOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who changed what, when and from where: uploads, deletes, collections, calibrations, keys and
    conversations, and every request refused for its key. Oldest first; without --since the newest rows."""
    from funnel.apps.state.audit import parse_since

    since_ts = parse_since(since) if since is not None else None
    with _store(data_dir, database) as (store, where):
        rows = [event.public() for event in store.read(limit, since_ts)]
    if as_json:
        out.print(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        out.print(f"no audit rows in {where}" + (" from that time on" if since is not None else ""))
        return
    for row in rows:
        out.print(line(row))
