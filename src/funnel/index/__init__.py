"""Stores: where chunks and vectors live. `open` picks the backend from the location."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from funnel.index.base import Store
from funnel.registry import Registry

REGISTRY = Registry("index", group="funnel.stores")

DEFAULT_TABLE_PREFIX = "funnel"
# `postgresql://host/db`, `postgresql:///db` (libpq: the local socket), and the same URL after pathlib folded
# its double slash (`postgresql:/host/db`, from a Path built by a caller).
_PG_URL = re.compile(r"^(postgres(?:ql)?):(/+)", re.IGNORECASE)


def _pg_url(text: str) -> str | None:
    """The location as a libpq URL, or None when it is not one."""
    match = _PG_URL.match(text)
    if match is None:
        return None
    slashes = match.group(2) if len(match.group(2)) >= 2 else "//"
    return f"{match.group(1).lower()}:{slashes}{text[match.end():]}"


@REGISTRY.register("postgresql://URL", match=_pg_url)
def _postgres(url: str, **_) -> Store:
    from funnel.index.postgres import PgStore

    dsn, prefix = _split_table(url)
    return PgStore(dsn, prefix)


@REGISTRY.register("DIR")
def _lance(directory: str, **_) -> Store:
    from funnel.index.lance import LanceStore

    return LanceStore(directory)


def open(location: str | Path) -> Store:  # noqa: A001  (funnel.index.open, as rerank.load and embed.load)
    """`postgresql://user@host:5432/db[?funnel_table=PREFIX]` (or `postgres://`): a PgStore with tables
    `PREFIX_*` (default "funnel"); a plugin's store (entry-point group `funnel.stores`); anything else: a
    LanceStore in that directory. Cheap: connects to nothing until the store is used."""
    return REGISTRY.load(str(location))


open_store = open  # the older name


def location_label(location: str | Path) -> str:
    """The location as it may be printed or logged: a URL's password replaced by ***."""
    url = _pg_url(str(location))
    if url is None:
        return str(location)
    base, _, query = url.partition("?")
    query = "&".join(
        f"{pair.partition('=')[0]}=***" if pair.partition("=")[0].lower() == "password" else pair
        for pair in query.split("&")
    ) if query else ""
    parts = urlsplit(base)
    if parts.password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        base = base.replace(parts.netloc, f"{parts.username}:***@{host}", 1)
    return f"{base}?{query}" if query else base


def _split_table(url: str) -> tuple[str, str]:
    """The URL without `funnel_table` (libpq refuses parameters it does not know), and that prefix. The
    other parameters are passed on exactly as written (re-encoding would turn %20 into +, which libpq
    does not decode)."""
    base, _, query = url.partition("?")  # by hand: urlunsplit would drop the empty host of postgresql:///db
    pairs = [pair for pair in query.split("&") if pair]
    ours = [unquote(p.partition("=")[2]) for p in pairs if p.partition("=")[0] == "funnel_table"]
    rest = "&".join(p for p in pairs if p.partition("=")[0] != "funnel_table")
    return (f"{base}?{rest}" if rest else base), (ours[-1] if ours else DEFAULT_TABLE_PREFIX)
