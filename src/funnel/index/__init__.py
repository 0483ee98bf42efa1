"""Stores: where chunks and vectors live. `open_store` picks the backend from the location."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from funnel.index.base import Store

DEFAULT_TABLE_PREFIX = "funnel"
# A URL that went through pathlib (settings and CLI options are Paths) has lost one of its slashes.
_PG_URL = re.compile(r"^(postgres(?:ql)?):/{1,2}(?!/)", re.IGNORECASE)


def open_store(location: str | Path) -> Store:
    """`postgresql://user@host:5432/db[?funnel_table=PREFIX]` (or `postgres://`): a PgStore with tables
    `PREFIX_*` (default "funnel"); anything else: a LanceStore in that directory. Cheap: connects to
    nothing until the store is used."""
    text = str(location)
    match = _PG_URL.match(text)
    if match is None:
        from funnel.index.lance import LanceStore

        return LanceStore(location)
    from funnel.index.postgres import PgStore

    dsn, prefix = _split_table(f"{match.group(1).lower()}://{text[match.end():]}")
    return PgStore(dsn, prefix)


def location_label(location: str | Path) -> str:
    """The location as it may be printed or logged: a URL's password replaced by ***."""
    text = str(location)
    match = _PG_URL.match(text)
    if match is None:
        return text
    parts = urlsplit(f"{match.group(1).lower()}://{text[match.end():]}")
    if parts.password is None:
        return parts.geturl()
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _split_table(url: str) -> tuple[str, str]:
    """The URL without `funnel_table` (libpq refuses parameters it does not know), and that prefix."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for k, v in query if k == "funnel_table"), DEFAULT_TABLE_PREFIX)
    rest = urlencode([(k, v) for k, v in query if k != "funnel_table"])
    return urlunsplit(parts._replace(query=rest)), prefix
