"""Conversation memory for `ask`: the last `max_turns` turns of a conversation, at most `max_chars` of them,
at most `max_conversations` conversations, the least recently used forgotten first. An id the service
does not know (forgotten, or chosen by the client) starts a new, empty conversation under that id.

`EmbeddedConversations` keeps them in this process (a restart forgets every conversation);
`PostgresConversations` in the service's PostgreSQL (`funnel serve --database`), with the same bounds, so
a conversation started on one process continues on any other and outlives restarts. `open_conversations`
chooses.

In PostgreSQL recency is a database sequence, not a clock, so processes whose clocks disagree still agree
on which conversation is oldest. Forgetting is lazy: each `add` deletes at most `evict_batch`
conversations beyond the bound, so no request pays for a backlog. A database that is down is
DatabaseUnavailable (503 with Retry-After), not an empty history: a follow-up answered without its
conversation would be a confident answer to a different question, and the client can retry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Protocol

from funnel.apps.state.db import Database

MAX_TURNS = 6
MAX_CHARS = 4000
MAX_CONVERSATIONS = 1000
# Of an answer, only this much is remembered: enough for a rewrite to see what "it" was.
ANSWER_CHARS = 600


@dataclass(frozen=True)
class Turn:
    question: str
    search_query: str
    answer: str

    @property
    def chars(self) -> int:
        return len(self.question) + len(self.answer)


def remembered(turn: Turn, max_chars: int) -> Turn:
    """What is kept of a turn: the question up to `max_chars`, the answer up to ANSWER_CHARS, no NUL
    characters (a PostgreSQL text cannot hold one; the in-process memory keeps what the database would)."""

    def clean(text: str) -> str:
        return text.replace("\x00", "")

    return Turn(clean(turn.question)[:max_chars], clean(turn.search_query), clean(turn.answer)[:ANSWER_CHARS])


class Conversations(Protocol):
    """Where conversations are remembered (`open_conversations` chooses)."""

    def __len__(self) -> int: ...

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        """The remembered turns, oldest first; reading a conversation makes it the most recently used."""

    def add(self, conversation_id: str, turn: Turn) -> None: ...


class _Bounded:
    """The bounds both memories keep."""

    def __init__(self, max_conversations: int, max_turns: int, max_chars: int):
        self.max_conversations = max_conversations
        self.max_turns = max_turns
        self.max_chars = max_chars


class EmbeddedConversations(_Bounded):
    """Thread-safe LRU of conversations in this process, each a bounded deque of turns."""

    def __init__(
        self,
        max_conversations: int = MAX_CONVERSATIONS,
        max_turns: int = MAX_TURNS,
        max_chars: int = MAX_CHARS,
    ):
        super().__init__(max_conversations, max_turns, max_chars)
        self._lock = threading.Lock()
        self._turns: OrderedDict[str, deque[Turn]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._turns)

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        with self._lock:
            turns = self._turns.get(conversation_id)
            if turns is None:
                return ()
            self._turns.move_to_end(conversation_id)
            return tuple(turns)

    def add(self, conversation_id: str, turn: Turn) -> None:
        turn = remembered(turn, self.max_chars)
        with self._lock:
            turns = self._turns.get(conversation_id)
            if turns is None:
                turns = self._turns[conversation_id] = deque(maxlen=self.max_turns)
            self._turns.move_to_end(conversation_id)
            turns.append(turn)
            while len(turns) > 1 and sum(t.chars for t in turns) > self.max_chars:
                turns.popleft()
            while len(self._turns) > self.max_conversations:
                self._turns.popitem(last=False)


# --- in the service database ---------------------------------------------------------------------------

EVICT_BATCH = 100

MIGRATIONS = (
    "CREATE SEQUENCE funnel_conversation_clock",
    """CREATE TABLE funnel_conversations (
        id text PRIMARY KEY, used bigint NOT NULL DEFAULT nextval('funnel_conversation_clock'))""",
    "CREATE INDEX funnel_conversations_used ON funnel_conversations (used)",
    """CREATE TABLE funnel_conversation_turns (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation_id text NOT NULL REFERENCES funnel_conversations ON DELETE CASCADE,
        question text NOT NULL, search_query text NOT NULL, answer text NOT NULL, chars int NOT NULL)""",
    "CREATE INDEX funnel_conversation_turns_conversation ON funnel_conversation_turns (conversation_id, id)",
)
# Locks the conversation's row until the commit, so two processes adding to one conversation trim in turn.
TOUCH = """INSERT INTO funnel_conversations (id) VALUES (%s)
    ON CONFLICT (id) DO UPDATE SET used = nextval('funnel_conversation_clock')"""
ADD_TURN = """INSERT INTO funnel_conversation_turns (conversation_id, question, search_query, answer, chars)
    VALUES (%s, %s, %s, %s, %s)"""
# Keeps the newest turns while there are at most max_turns of them and they hold at most max_chars, and
# always the newest one (the in-process deque's rule).
TRIM_TURNS = """DELETE FROM funnel_conversation_turns t USING (
        SELECT id, row_number() OVER newest_first AS n, sum(chars) OVER newest_first AS chars
        FROM funnel_conversation_turns WHERE conversation_id = %(id)s
        WINDOW newest_first AS (ORDER BY id DESC)
    ) kept WHERE t.id = kept.id AND kept.n > 1 AND (kept.n > %(max_turns)s OR kept.chars > %(max_chars)s)"""
# SKIP LOCKED: a conversation that another process is adding to is in use, not old; skipping it only ever
# forgets fewer.
EVICT = """DELETE FROM funnel_conversations WHERE id IN (
    SELECT id FROM funnel_conversations ORDER BY used DESC OFFSET %s LIMIT %s FOR UPDATE SKIP LOCKED)"""
HISTORY = """WITH touched AS (
        UPDATE funnel_conversations SET used = nextval('funnel_conversation_clock') WHERE id = %(id)s)
    SELECT question, search_query, answer FROM funnel_conversation_turns WHERE conversation_id = %(id)s
    ORDER BY id"""


def open_conversations(
    db: Database | None,
    max_conversations: int = MAX_CONVERSATIONS,
    max_turns: int = MAX_TURNS,
    max_chars: int = MAX_CHARS,
) -> Conversations:
    """The service's conversation memory: in this process without a database, shared through `db` with one."""
    if db is None:
        return EmbeddedConversations(max_conversations, max_turns, max_chars)
    return PostgresConversations(db, max_conversations, max_turns, max_chars)


class PostgresConversations(_Bounded):
    """The same verbs over the service's database."""

    def __init__(
        self,
        db: Database,
        max_conversations: int = MAX_CONVERSATIONS,
        max_turns: int = MAX_TURNS,
        max_chars: int = MAX_CHARS,
        evict_batch: int = EVICT_BATCH,
    ):
        super().__init__(max_conversations, max_turns, max_chars)
        self.db = db
        self.evict_batch = evict_batch
        self._migrated = False

    def __len__(self) -> int:
        self._migrate()
        with self.db.connection() as conn:
            return conn.execute("SELECT count(*) FROM funnel_conversations").fetchone()[0]

    def history(self, conversation_id: str) -> tuple[Turn, ...]:
        """The remembered turns, oldest first; reading a conversation makes it the most recently used."""
        self._migrate()
        with self.db.connection() as conn:
            rows = conn.execute(HISTORY, {"id": conversation_id}).fetchall()
        return tuple(Turn(*row) for row in rows)

    def add(self, conversation_id: str, turn: Turn) -> None:
        turn = remembered(turn, self.max_chars)
        self._migrate()
        bounds = {"id": conversation_id, "max_turns": self.max_turns, "max_chars": self.max_chars}
        with self.db.transaction() as conn:
            conn.execute(TOUCH, [conversation_id])
            conn.execute(ADD_TURN, [conversation_id, turn.question, turn.search_query, turn.answer,
                                    turn.chars])
            conn.execute(TRIM_TURNS, bounds)
        # After the commit, on its own: forgetting old conversations never holds up this one.
        with self.db.connection() as conn:
            conn.execute(EVICT, [self.max_conversations, self.evict_batch])

    def _migrate(self) -> None:
        if not self._migrated:
            self.db.migrate("conversations", MIGRATIONS)
            self._migrated = True
