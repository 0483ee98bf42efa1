"""Conversations in the service's PostgreSQL (`funnel serve --database`): the verbs of
`funnel.apps.state.conversation_rows` over tables every process shares, with the same bounds, so a
conversation started on one process continues on any other and outlives restarts.

Recency is a database sequence, not a clock, so processes whose clocks disagree still agree on which
conversation is oldest. Forgetting is lazy: each `add` deletes at most `evict_batch` conversations beyond
a bound (`conversation_rows.SqlConversations`), so no request pays for a backlog. A database that is down is `DatabaseUnavailable`.

Schema version 2 names a conversation by (collection, id) and gives it a title and times; version 1's
conversations had no collection, so they cannot be listed under one and are dropped (they were at most six
turns of memory each). Version 3 adds who started each conversation (its owner), so forgetting is bounded
per collection and per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from funnel.apps.state.conversation_rows import (MAX_CHARS, MAX_CONVERSATIONS, MAX_PER_OWNER, MAX_TURNS,
                                                 SqlConversations)
from funnel.apps.state.db import Database
from funnel.apps.state.tables import ComponentTables

COMPONENT = "conversations"
EVICT_BATCH = 100

MIGRATIONS = (
    # version 1: conversations without a collection
    "CREATE SEQUENCE funnel_conversation_clock",
    """CREATE TABLE funnel_conversations (
        id text PRIMARY KEY, used bigint NOT NULL DEFAULT nextval('funnel_conversation_clock'))""",
    "CREATE INDEX funnel_conversations_used ON funnel_conversations (used)",
    """CREATE TABLE funnel_conversation_turns (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation_id text NOT NULL REFERENCES funnel_conversations ON DELETE CASCADE,
        question text NOT NULL, search_query text NOT NULL, answer text NOT NULL, chars int NOT NULL)""",
    "CREATE INDEX funnel_conversation_turns_conversation ON funnel_conversation_turns (conversation_id, id)",
    # version 2: each in a collection, with a title and times
    "DROP TABLE funnel_conversation_turns",
    "DROP TABLE funnel_conversations",
    """CREATE TABLE funnel_conversations (
        key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, collection text NOT NULL, id text NOT NULL,
        title text NOT NULL, created_ts double precision NOT NULL, updated_ts double precision NOT NULL,
        used bigint NOT NULL DEFAULT nextval('funnel_conversation_clock'), UNIQUE (collection, id))""",
    "CREATE INDEX funnel_conversations_used ON funnel_conversations (used)",
    "CREATE INDEX funnel_conversations_updated ON funnel_conversations (collection, updated_ts)",
    """CREATE TABLE funnel_conversation_turns (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation bigint NOT NULL REFERENCES funnel_conversations ON DELETE CASCADE,
        question text NOT NULL, search_query text NOT NULL, answer text NOT NULL, citations text NOT NULL,
        chars int NOT NULL)""",
    "CREATE INDEX funnel_conversation_turns_conversation ON funnel_conversation_turns (conversation, id)",
    # version 3: who started each conversation: forgetting is bounded per collection and per key
    "ALTER TABLE funnel_conversations ADD COLUMN owner text NOT NULL DEFAULT ''",
    "CREATE INDEX funnel_conversations_owner ON funnel_conversations (collection, owner, used)",
    "CREATE INDEX funnel_conversations_collection_used ON funnel_conversations (collection, used)",
)
class PostgresConversations(SqlConversations):
    """The verbs over the service's database; the tables are created on first use."""

    _mark = "%s"
    _NEXT_USED = "nextval('funnel_conversation_clock')"
    # A conversation that another process is adding to is in use, not old: skipping it only forgets fewer.
    _LOCKED = " FOR UPDATE SKIP LOCKED"

    def __init__(
        self,
        db: Database,
        max_conversations: int = MAX_CONVERSATIONS,
        max_turns: int = MAX_TURNS,
        max_chars: int = MAX_CHARS,
        evict_batch: int = EVICT_BATCH,
        *,
        max_per_owner: int = MAX_PER_OWNER,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(max_conversations, max_turns, max_chars, clock, max_per_owner)
        self.db = db
        self.evict_batch = evict_batch
        self._tables = ComponentTables(db, COMPONENT, MIGRATIONS)

    def __repr__(self) -> str:
        return f"PostgresConversations({self.db.label!r})"

    @contextmanager
    def _connection(self) -> Iterator:
        with self._tables.connection() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator:
        with self._tables.transaction() as conn:
            yield conn
