"""Conversations of `ask`: each belongs to one collection, has a title (its first question, shortened, until
renamed), created and updated times, and its last turns. Memory is bounded: the last `max_turns` turns of a
conversation, at most `max_chars` of them (counting an answer as much of it as the rewrite reads), at most
`max_conversations` conversations in a collection and `max_per_owner` of one key there, the least
recently used forgotten first, never across collections (a reader flooding one collection with new
conversations forgets its own, then that collection's: issue 40). An id a collection does not
know (forgotten, deleted, chosen by the client, or another collection's) starts a new, empty conversation
under that id in that collection: a conversation is named by (collection, id), so asking in one collection
never reads another's.

Two stores run the same SQL (`conversation_rows.SqlConversations`, with the records and the bounds) apart
from how recency is counted and how the forgotten are deleted; `open_conversations` chooses:

- `EmbeddedConversations`: an SQLite file in the service's data dir (`conversations.sqlite`,
  `funnel.apps.state.sqlite`), so they outlive a restart of `funnel serve`. Recency is one more than the
  most recent.
- `PostgresConversations`: the service's PostgreSQL (`funnel serve --database`), where every process shares
  them, so a conversation started on one process continues on any other. Recency is a database sequence,
  not a clock, so processes whose clocks disagree still agree on which conversation is oldest; forgetting is
  lazy (each `add` deletes at most `evict_batch` conversations beyond a bound), so no request pays for a
  backlog. Its first tables had conversations without a collection; they could not be listed under one and
  were dropped when conversations gained a collection, a title and times (they were at most six turns of
  memory each).

In both, who started each conversation (its owner) came later, so forgetting is bounded per collection and
per key; conversations kept from before have the owner "".

Either store may be down (PostgreSQL unreachable, the SQLite file unwritable): every verb then raises a
one-line StoreError. `ask` answers anyway, without the conversation's memory and with a note saying so
(`funnel.apps.api.ask`): an answer to the question as asked is more use than a 503, and the note keeps it
from passing for a follow-up that was understood. The conversation routes answer 503.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from funnel.apps.state.conversation_rows import (
    ANSWER_CHARS,
    CITED_TEXT_CHARS,
    FILE_NAME,
    MAX_CHARS,
    MAX_CONVERSATIONS,
    MAX_PAGE,
    MAX_PER_OWNER,
    MAX_TURNS,
    OPEN_OWNER,
    TITLE_CHARS,
    CitedPassage,
    Conversation,
    ConversationSummary,
    SqlConversations,
    Turn,
)
from funnel.apps.state.db import Database
from funnel.apps.state.sqlite import InFile, SqliteFile, in_data_dir
from funnel.apps.state.tables import InDatabase

__all__ = [
    "ANSWER_CHARS", "CITED_TEXT_CHARS", "MAX_CHARS", "MAX_CONVERSATIONS", "MAX_PAGE", "MAX_PER_OWNER", "MAX_TURNS",
    "OPEN_OWNER", "TITLE_CHARS",
    "CitedPassage", "Conversation", "ConversationSummary", "Conversations", "EmbeddedConversations",
    "PostgresConversations", "Turn", "open_conversations",
]

SQLITE_STEPS = (
    (  # version 1
        """CREATE TABLE funnel_conversations (
        key INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL,
        created_ts REAL NOT NULL, updated_ts REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0,
        UNIQUE (collection, id))""",
        "CREATE INDEX funnel_conversations_used ON funnel_conversations (used)",
        "CREATE INDEX funnel_conversations_updated ON funnel_conversations (collection, updated_ts)",
        """CREATE TABLE funnel_conversation_turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT, conversation INTEGER NOT NULL, question TEXT NOT NULL,
        search_query TEXT NOT NULL, answer TEXT NOT NULL, citations TEXT NOT NULL, chars INTEGER NOT NULL)""",
        "CREATE INDEX funnel_conversation_turns_conversation ON funnel_conversation_turns (conversation, id)",
    ),
    (  # version 2: who started each conversation: forgetting is bounded per collection and per key
        "ALTER TABLE funnel_conversations ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX funnel_conversations_owner ON funnel_conversations (collection, owner, used)",
        "CREATE INDEX funnel_conversations_collection_used ON funnel_conversations (collection, used)",
    ),
)
COMPONENT = "conversations"  # the service database's
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


class Conversations(Protocol):
    """Where conversations are kept (`open_conversations` chooses). A StoreError says the store is down."""

    def __len__(self) -> int: ...

    def history(self, collection: str, conversation_id: str) -> tuple[Turn, ...]:
        """The remembered turns, oldest first; reading a conversation makes it the most recently used."""

    def owner(self, collection: str, conversation_id: str) -> str | None:
        """Who started it (a key's id, `api_key`, `open`); None when the collection has none by that id."""

    def add(self, collection: str, conversation_id: str, turn: Turn, owner: str = OPEN_OWNER) -> None:
        """Appends a turn, starting the conversation (titled by its question, owned by `owner`) when the
        collection has none by that id."""

    def list(self, collection: str, limit: int = 50, offset: int = 0) -> list[ConversationSummary]:
        """The collection's conversations, the most recently updated first."""

    def get(self, collection: str, conversation_id: str) -> Conversation | None: ...

    def rename(self, collection: str, conversation_id: str, title: str) -> ConversationSummary | None: ...

    def delete(self, collection: str, conversation_id: str) -> bool: ...

    def forget_collection(self, collection: str) -> None:
        """Every conversation of a deleted collection goes with it."""


def open_conversations(db: Database | None, data_dir: Path | str | None = None, **bounds) -> Conversations:
    """The service's conversations: shared through the service database `db` when there is one, else in
    `conversations.sqlite` under `data_dir`. Nothing is opened here (a store that is down fails a request,
    not the start). `bounds`: max_conversations, max_turns, max_chars, max_per_owner (`SqlConversations`)."""
    if db is None:
        return EmbeddedConversations(in_data_dir(data_dir, FILE_NAME, "embedded conversations"), **bounds)
    return PostgresConversations(db, **bounds)


class EmbeddedConversations(InFile, SqlConversations):
    """Conversations in the SQLite file at `path`, made on first use (`funnel.apps.state.sqlite`)."""

    # Recency: one more than the most recent (indexed, so a lookup of the index's last entry).
    _NEXT_USED = "(SELECT coalesce(max(used), 0) + 1 FROM funnel_conversations)"

    def __init__(self, path: Path | str, **bounds):
        """`bounds`: `SqlConversations`' (max_conversations, max_turns, max_chars, max_per_owner, clock)."""
        super().__init__(**bounds)
        self._in_file(SqliteFile(path, SQLITE_STEPS, "conversation database", durable=False))


class PostgresConversations(InDatabase, SqlConversations):
    """Conversations in the service's database; the tables are created on first use."""

    _NEXT_USED = "nextval('funnel_conversation_clock')"
    # A conversation that another process is adding to is in use, not old: skipping it only forgets fewer.
    _LOCKED = " FOR UPDATE SKIP LOCKED"

    def __init__(self, db: Database, evict_batch: int = EVICT_BATCH, **bounds):
        super().__init__(**bounds)
        self.evict_batch = evict_batch
        self._on_database(db, COMPONENT, MIGRATIONS)


