"""What both conversation stores share (`funnel.apps.state.conversations`): the frozen records, the bounds,
and the verbs written once in SQL that SQLite and PostgreSQL both run (`SqlConversations`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime

MAX_TURNS = 6
MAX_CHARS = 4000
MAX_CONVERSATIONS = 1000  # per collection
MAX_PER_OWNER = 200  # per key, in one collection
OPEN_OWNER = "open"  # who starts a conversation on a service without keys: no per-owner bound
# Of an answer, this much is kept, so a reopened conversation shows it (an LLM's long answers included) ...
ANSWER_CHARS = 8000
# ... and this much counts towards `max_chars`: what a rewrite of the next question reads of it.
REWRITE_ANSWER_CHARS = 600
# Of a cited passage, this much is kept (the page fetches the whole chunk when a citation is opened).
CITED_TEXT_CHARS = 500
MAX_CITATIONS = 20
TITLE_CHARS = 80
MAX_PAGE = 200
FILE_NAME = "conversations.sqlite"


@dataclass(frozen=True)
class CitedPassage:
    """What a remembered turn keeps of a citation: enough to show it and to open its passage."""

    number: int
    chunk_id: str
    document_id: str
    path: str
    title: str
    location: str
    text: str
    page: int | None = None

    def to_json(self) -> dict:
        return {"number": self.number, "chunk_id": self.chunk_id, "document_id": self.document_id,
                "path": self.path, "title": self.title, "location": self.location, "text": self.text,
                "page": self.page}


@dataclass(frozen=True)
class Turn:
    question: str
    search_query: str
    answer: str
    citations: tuple[CitedPassage, ...] = ()

    @property
    def chars(self) -> int:
        return len(self.question) + min(len(self.answer), REWRITE_ANSWER_CHARS)


@dataclass(frozen=True)
class ConversationSummary:
    id: str
    title: str
    created_at: str  # ISO 8601, UTC
    updated_at: str
    turns: int


@dataclass(frozen=True)
class Conversation:
    summary: ConversationSummary
    turns: tuple[Turn, ...]


def _clean(text: str) -> str:
    return text.replace("\x00", "")  # a PostgreSQL text cannot hold one; SQLite keeps what it would


def remembered(turn: Turn, max_chars: int) -> Turn:
    """What is kept of a turn: the question up to `max_chars`, the answer up to ANSWER_CHARS, at most
    MAX_CITATIONS citations with their passages cut to CITED_TEXT_CHARS, no NUL characters."""
    cited = tuple(
        CitedPassage(c.number, _clean(c.chunk_id), _clean(c.document_id), _clean(c.path), _clean(c.title),
                     _clean(c.location), _clean(c.text)[:CITED_TEXT_CHARS], c.page)
        for c in turn.citations[:MAX_CITATIONS]
    )
    return Turn(_clean(turn.question)[:max_chars], _clean(turn.search_query), _clean(turn.answer)[:ANSWER_CHARS],
                cited)


def title_of(question: str) -> str:
    """A conversation's first title: its first question on one line, cut at a word near TITLE_CHARS."""
    text = " ".join(_clean(question).split())
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[: TITLE_CHARS - 1]
    if " " in cut[TITLE_CHARS // 2:]:
        cut = cut.rsplit(" ", 1)[0]
    return cut + "…"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class SqlConversations:
    """The verbs, in SQL both stores run (written with `?`; `_mark` is the driver's). A backend gives its
    connections and how a touch counts recency (`_NEXT_USED`).

    Forgetting never crosses a collection: past `max_per_owner` conversations of one key in a collection, that
    key's least recently used there go; past `max_conversations` in a collection, that collection's. So a key
    flooding new conversations forgets its own first, then its collection's, never another collection's.
    Each `add` forgets at most `evict_batch` (PostgreSQL: 100), so no request pays for a backlog."""

    _mark = "?"
    _NEXT_USED: str

    _LOCKED = ""  # appended to the eviction's SELECT (PostgreSQL: skip rows another process holds)
    evict_batch = 1000

    def __init__(self, max_conversations: int = MAX_CONVERSATIONS, max_turns: int = MAX_TURNS,
                 max_chars: int = MAX_CHARS, *, max_per_owner: int = MAX_PER_OWNER,
                 clock: Callable[[], float] = time.time):
        self.max_conversations = max_conversations
        self.max_per_owner = max_per_owner
        self.max_turns = max_turns
        self.max_chars = max_chars
        self._clock = clock

    def _connection(self) -> AbstractContextManager:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager:
        raise NotImplementedError

    def _evict(self, collection: str, owner: str) -> None:
        bounds = [("collection = ?", [collection], self.max_conversations)]
        if owner != OPEN_OWNER:
            bounds.insert(0, ("collection = ? AND owner = ?", [collection, owner], self.max_per_owner))
        with self._transaction() as conn:
            for where, args, bound in bounds:
                keys = [r[0] for r in self._run(
                    conn, f"SELECT key FROM funnel_conversations WHERE {where} ORDER BY used DESC "
                          f"LIMIT ? OFFSET ?{self._LOCKED}", [*args, self.evict_batch, bound]).fetchall()]
                if keys:
                    marks = ", ".join("?" * len(keys))
                    self._run(conn, f"DELETE FROM funnel_conversation_turns WHERE conversation IN ({marks})", keys)
                    self._run(conn, f"DELETE FROM funnel_conversations WHERE key IN ({marks})", keys)

    def _sql(self, sql: str) -> str:
        return sql if self._mark == "?" else sql.replace("?", self._mark)

    def _run(self, conn, sql: str, args=()):
        return conn.execute(self._sql(sql), list(args))

    def __len__(self) -> int:
        with self._connection() as conn:
            return int(self._run(conn, "SELECT count(*) FROM funnel_conversations").fetchone()[0])

    def _key(self, conn, collection: str, conversation_id: str) -> int | None:
        row = self._run(conn, "SELECT key FROM funnel_conversations WHERE collection = ? AND id = ?",
                        [collection, conversation_id]).fetchone()
        return int(row[0]) if row else None

    def _turns(self, conn, key: int) -> tuple[Turn, ...]:
        rows = self._run(conn, "SELECT question, search_query, answer, citations FROM funnel_conversation_turns "
                               "WHERE conversation = ? ORDER BY id", [key]).fetchall()
        return tuple(Turn(q, s, a, _citations(c)) for q, s, a, c in rows)

    def history(self, collection: str, conversation_id: str) -> tuple[Turn, ...]:
        with self._transaction() as conn:
            key = self._key(conn, collection, conversation_id)
            if key is None:
                return ()
            self._run(conn, f"UPDATE funnel_conversations SET used = {self._NEXT_USED} WHERE key = ?", [key])
            return self._turns(conn, key)

    def owner(self, collection: str, conversation_id: str) -> str | None:
        """Who started the conversation (a key's id, `api_key`, `open`; "" for one kept before owners were);
        None when the collection has none by that id."""
        with self._connection() as conn:
            row = self._run(conn, "SELECT owner FROM funnel_conversations WHERE collection = ? AND id = ?",
                            [collection, conversation_id]).fetchone()
        return row[0] if row else None

    def add(self, collection: str, conversation_id: str, turn: Turn, owner: str = OPEN_OWNER) -> None:
        turn = remembered(turn, self.max_chars)
        now = self._clock()
        with self._transaction() as conn:
            # The upsert locks the conversation's row until the commit (PostgreSQL), or the file is locked
            # (SQLite): two processes adding to one conversation trim in turn.
            key = self._run(
                conn,
                "INSERT INTO funnel_conversations (collection, id, title, created_ts, updated_ts, owner) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (collection, id) DO UPDATE SET "
                f"updated_ts = EXCLUDED.updated_ts, used = {self._NEXT_USED} RETURNING key",
                [collection, conversation_id, title_of(turn.question) or conversation_id, now, now, owner],
            ).fetchone()[0]
            self._run(conn, "INSERT INTO funnel_conversation_turns (conversation, question, search_query, answer, "
                            "citations, chars) VALUES (?, ?, ?, ?, ?, ?)",
                      [key, turn.question, turn.search_query, turn.answer,
                       json.dumps([c.to_json() for c in turn.citations], ensure_ascii=False), turn.chars])
            rows = self._run(conn, "SELECT id, chars FROM funnel_conversation_turns WHERE conversation = ? "
                                   "ORDER BY id DESC", [key]).fetchall()
            gone = _beyond_bounds(rows, self.max_turns, self.max_chars)
            if gone:
                marks = ", ".join("?" * len(gone))
                self._run(conn, f"DELETE FROM funnel_conversation_turns WHERE id IN ({marks})", gone)
        self._evict(collection, owner)  # after the commit, on its own: forgetting old conversations never holds up this one

    def list(self, collection: str, limit: int = 50, offset: int = 0) -> list[ConversationSummary]:
        limit, offset = max(1, min(limit, MAX_PAGE)), max(0, offset)
        with self._connection() as conn:
            rows = self._run(
                conn,
                "SELECT c.id, c.title, c.created_ts, c.updated_ts, (SELECT count(*) FROM funnel_conversation_turns t "
                "WHERE t.conversation = c.key) FROM funnel_conversations c WHERE c.collection = ? "
                "ORDER BY c.updated_ts DESC, c.key DESC LIMIT ? OFFSET ?",
                [collection, limit, offset],
            ).fetchall()
        return [_summary(row) for row in rows]

    def _summary(self, conn, collection: str, conversation_id: str) -> ConversationSummary | None:
        row = self._run(
            conn,
            "SELECT c.id, c.title, c.created_ts, c.updated_ts, (SELECT count(*) FROM funnel_conversation_turns t "
            "WHERE t.conversation = c.key) FROM funnel_conversations c WHERE c.collection = ? AND c.id = ?",
            [collection, conversation_id],
        ).fetchone()
        return _summary(row) if row else None

    def get(self, collection: str, conversation_id: str) -> Conversation | None:
        with self._transaction() as conn:
            summary = self._summary(conn, collection, conversation_id)
            if summary is None:
                return None
            return Conversation(summary, self._turns(conn, self._key(conn, collection, conversation_id)))

    def rename(self, collection: str, conversation_id: str, title: str) -> ConversationSummary | None:
        with self._transaction() as conn:
            self._run(conn, "UPDATE funnel_conversations SET title = ? WHERE collection = ? AND id = ?",
                      [" ".join(_clean(title).split())[:200] or conversation_id, collection, conversation_id])
            return self._summary(conn, collection, conversation_id)

    def delete(self, collection: str, conversation_id: str) -> bool:
        with self._transaction() as conn:
            key = self._key(conn, collection, conversation_id)
            if key is None:
                return False
            self._run(conn, "DELETE FROM funnel_conversation_turns WHERE conversation = ?", [key])
            self._run(conn, "DELETE FROM funnel_conversations WHERE key = ?", [key])
            return True

    def forget_collection(self, collection: str) -> None:
        with self._transaction() as conn:
            self._run(conn, "DELETE FROM funnel_conversation_turns WHERE conversation IN "
                            "(SELECT key FROM funnel_conversations WHERE collection = ?)", [collection])
            self._run(conn, "DELETE FROM funnel_conversations WHERE collection = ?", [collection])


def _beyond_bounds(newest_first: list, max_turns: int, max_chars: int) -> list[int]:
    """The ids of the turns to forget: all but the newest ones that fit `max_turns` and `max_chars`; the
    newest is always kept, however long."""
    gone, chars = [], 0
    for n, (turn_id, turn_chars) in enumerate(newest_first, start=1):
        chars += turn_chars
        if n > 1 and (n > max_turns or chars > max_chars):
            gone.append(turn_id)
    return gone


def _summary(row) -> ConversationSummary:
    cid, title, created, updated, turns = row
    return ConversationSummary(cid, title, iso(created), iso(updated), int(turns))


def _citations(text) -> tuple[CitedPassage, ...]:
    data = json.loads(text) if isinstance(text, str) else (text or [])
    return tuple(CitedPassage(**c) for c in data)
