"""Conversations of `ask`: each belongs to one collection, has a title (its first question, shortened, until
renamed), created and updated times, and its last turns. Memory is bounded: the last `max_turns` turns of a
conversation, at most `max_chars` of them (counting an answer as much of it as the rewrite reads), at most
`max_conversations` conversations in a collection and `max_per_owner` of one key there, the least
recently used forgotten first, never across collections (a reader flooding one collection with new
conversations forgets its own, then that collection's: issue 40). An id a collection does not
know (forgotten, deleted, chosen by the client, or another collection's) starts a new, empty conversation
under that id in that collection: a conversation is named by (collection, id), so asking in one collection
never reads another's.

`EmbeddedConversations` (`conversations_sqlite`) keeps them in an SQLite file in the service's data dir (`conversations.sqlite`), so
they outlive a restart of `funnel serve`; `PostgresConversations` (`conversations_pg`) in the service's
PostgreSQL (`funnel serve --database`), where every process shares them. `open_conversations` chooses. Both
run the same SQL (`conversation_rows.SqlConversations`) apart from how recency is counted and how the forgotten are deleted.

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
    OPEN_OWNER,
    MAX_TURNS,
    TITLE_CHARS,
    CitedPassage,
    Conversation,
    ConversationSummary,
    Turn,
)
from funnel.apps.state.conversations_pg import PostgresConversations
from funnel.apps.state.conversations_sqlite import EmbeddedConversations

__all__ = [
    "ANSWER_CHARS", "CITED_TEXT_CHARS", "MAX_CHARS", "MAX_CONVERSATIONS", "MAX_PAGE", "MAX_PER_OWNER", "MAX_TURNS",
    "OPEN_OWNER", "TITLE_CHARS",
    "CitedPassage", "Conversation", "ConversationSummary", "Conversations", "EmbeddedConversations",
    "PostgresConversations", "Turn", "open_conversations",
]


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


def open_conversations(
    db,
    data_dir: Path | str | None = None,
    max_conversations: int = MAX_CONVERSATIONS,
    max_turns: int = MAX_TURNS,
    max_chars: int = MAX_CHARS,
    max_per_owner: int = MAX_PER_OWNER,
) -> Conversations:
    """The service's conversations: shared through the service database `db` when there is one, else in
    `conversations.sqlite` under `data_dir`. Nothing is opened here (a store that is down fails a request,
    not the start)."""
    if db is None:
        if data_dir is None:
            raise ValueError("embedded conversations need the service's data dir")
        return EmbeddedConversations(Path(data_dir) / FILE_NAME, max_conversations, max_turns, max_chars,
                                     max_per_owner=max_per_owner)
    return PostgresConversations(db, max_conversations, max_turns, max_chars, max_per_owner=max_per_owner)
