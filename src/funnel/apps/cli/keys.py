"""`funnel keys create|list|revoke`: the service's API keys, in the data dir's `keys.sqlite` or, with
`--database`, the service's PostgreSQL (see `funnel.apps.state.keys`). A running server sees a new or
revoked key within the store's cache bound (5 s).

A key made or revoked here is in the audit log as one made or revoked through `/v1/keys` would be (the
status the route would answer), by `cli:USER` from `local`; as on the API, a log that cannot take the row
refuses the change before it is made."""

from __future__ import annotations

import getpass
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from funnel.apps.cli.common import JsonOpt, app, out, settings_from
from funnel.errors import NotFound

keys_app = typer.Typer(no_args_is_help=True, help="API keys: reader, writer or admin, on some collections or all.")
app.add_typer(keys_app, name="keys")

DataDirOpt = Annotated[Path | None, typer.Option(help="the service's data dir \\[env FUNNEL_SERVE__DATA_DIR]")]
DatabaseOpt = Annotated[str | None, typer.Option(help="the service's PostgreSQL \\[env FUNNEL_DATABASE__URL]")]


@contextmanager
def _store(data_dir: Path | None, database: str | None):
    from funnel.apps.api.library import open_database
    from funnel.apps.state.keys import open_keys

    settings = settings_from(data_dir=data_dir, database=database)
    db = open_database(settings)
    try:
        yield open_keys(db, settings.serve.data_dir), (db.label if db is not None else str(settings.serve.data_dir))
    finally:
        if db is not None:
            db.close()


def _check_collections(names: list[str] | None, data_dir: Path | None, database: str | None) -> None:
    """A key is for collections that exist (see `funnel.apps.state.keys.KeyVerifier.unbind`)."""
    from funnel.apps.api.library import open_database
    from funnel.apps.state.home import open_home
    from funnel.apps.state.keys import check_collections

    if not names:
        return
    settings = settings_from(data_dir=data_dir, database=database)
    db = open_database(settings)
    try:
        check_collections(names, open_home(db, settings.serve.data_dir).names())
    finally:
        if db is not None:
            db.close()


@contextmanager
def _audited(data_dir: Path | None, database: str | None, action: str, route: str):
    """The key store, where it is, and `note(status, target)`, which records the change in the audit log
    (asked first whether it would take a row: if not, nothing is changed)."""
    from funnel.apps.api.library import open_database
    from funnel.apps.state.audit import AuditEvent, open_audit
    from funnel.apps.state.keys import open_keys

    settings = settings_from(data_dir=data_dir, database=database)
    db = open_database(settings)
    try:
        log = open_audit(db, settings.serve.data_dir)
        log.check()

        def note(status: int, target: str | None) -> None:
            log.append(AuditEvent(ts=time.time(), who=f"cli:{_user()}", action=action, route=route,
                                  client="local", status=status, target=target))

        where = db.label if db is not None else str(settings.serve.data_dir)
        yield open_keys(db, settings.serve.data_dir), where, note
    finally:
        if db is not None:
            db.close()


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "unknown"


def _line(row: dict) -> str:
    names = row["collections"] if isinstance(row["collections"], str) else ",".join(row["collections"])
    limits = "".join(f"  {name}={_limit(row.get(name))}" for name in ("rpm", "upload_mb_per_day"))
    return (f"{row['id']}  {row['role']:<6}  {row['state']:<7}  collections={names}  created={row['created']}  "
            f"expires={row['expires'] or 'never'}{limits}")


def _limit(value) -> str:
    return "default" if value is None else "unlimited" if value == 0 else f"{value:g}"


@keys_app.command("create")
def create(
    role: Annotated[str, typer.Option(help="reader, writer or admin")],
    collection: Annotated[list[str] | None, typer.Option(
        "--collection", help="a collection the key may use (repeatable); none: every collection")] = None,
    expires: Annotated[float | None, typer.Option(help="days until the key stops working")] = None,
    rpm: Annotated[int | None, typer.Option(
        help="requests per minute (0: unlimited; none: [serve] key_rpm)")] = None,
    upload_mb_per_day: Annotated[float | None, typer.Option(
        help="upload MiB per UTC day (0: unlimited; none: [serve] key_upload_mb_per_day)")] = None,
    data_dir: DataDirOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Make a key and print it, alone, on the last line. It is shown only this once: only its hash is kept.
    Over its limits a request gets 429 with Retry-After."""
    from funnel.apps.state.keys import new_key

    made = new_key(role, collection or None, expires, rpm=rpm, upload_mb_per_day=upload_mb_per_day)
    _check_collections(collection, data_dir, database)
    scope = ",".join(made.record.collections) if made.record.collections is not None else "all"
    with _audited(data_dir, database, "key.create", "funnel keys create") as (store, where, note):
        store.add(made.record)
        note(201, f"{made.record.id} ({made.record.role.value} on {scope})")
    out.print(_line(made.record.public(time.time())) + f"  (in {where}; the key is shown only once)")
    out.print(made.token)


@keys_app.command("list")
def list_keys(data_dir: DataDirOpt = None, database: DatabaseOpt = None, as_json: JsonOpt = False) -> None:
    """Every key made, revoked and expired ones included; never a secret."""
    now = time.time()
    with _store(data_dir, database) as (store, where):
        rows = [k.public(now) for k in store.list()]
    if as_json:
        out.print(json.dumps(rows))
        return
    if not rows:
        out.print(f"no keys in {where}: the service is open unless [serve] api_key is set")
        return
    for row in rows:
        out.print(_line(row))


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="the key's id (the 12 characters after fk_), or the whole key")],
    data_dir: DataDirOpt = None,
    database: DatabaseOpt = None,
) -> None:
    """Revoke a key: every server refuses it within 5 s. It stays listed, as revoked."""
    from funnel.apps.state.keys import CACHE_TTL_S, parse_token

    parsed = parse_token(key_id.strip())
    key_id = parsed[0] if parsed else key_id.strip().removeprefix("fk_")
    with _audited(data_dir, database, "key.revoke", "funnel keys revoke") as (store, _, note):
        record = store.revoke(key_id, time.time())
        note(204 if record is not None else 404, key_id[:64])
    if record is None:
        raise NotFound(f"no key {key_id[:40]!r} (funnel keys list shows them)")
    out.print(f"revoked; every server refuses it within {CACHE_TTL_S:g} s")
    out.print(record.id)
