"""The rewriting of a follow-up question into one that retrieval can answer on its own ("How many employees
does it have?" -> "... Zentara Robotics"), from the conversation's remembered turns
(`funnel.apps.state.conversations`).
"""

from __future__ import annotations

import logging
import re
import secrets

from funnel.apps.state.conversations import Turn
from funnel.generate.chat import ChatMessage, ChatModel
from funnel.generate.llm import FALLBACK_ERRORS

log = logging.getLogger("funnel.api")

CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

PRONOUNS = frozenset({
    "it", "its", "it's", "they", "them", "their", "theirs", "that", "this", "those", "these", "he", "him",
    "his", "she", "her", "hers", "there", "such",
})
_STOP = frozenset({
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "not", "is",
    "are", "was", "were", "be", "been", "being", "what", "which", "who", "whom", "whose", "when", "where",
    "why", "how", "does", "do", "did", "has", "have", "had", "as", "i", "you", "we", "me", "my", "our",
    "your", "than", "then", "so", "if", "into", "about", "can", "could", "would", "should", "will", "much",
    "many", "tell", "please", "also", "any", "some", "more",
}) | PRONOUNS
_WORD = re.compile(r"[A-Za-z0-9][\w'&.-]*[A-Za-z0-9]|[A-Za-z0-9]")
_LABEL = re.compile(r"^(standalone question|rewritten question|question)\s*:\s*", re.IGNORECASE)
# Verbs a question asks with, which say nothing of its subject ("What happened in the March outage?").
_VERBS = frozenset({
    "happen", "happened", "happens", "say", "says", "said", "mean", "means", "meant", "know", "describe",
    "explain", "get", "got", "need", "needed", "want", "show", "give", "find", "see",
})
MAX_KEY_TERMS = 8
SHORT_FOLLOW_UP_WORDS = 4
# "Who owns the follow-up action?": a question about "the" something, with this few content words, is about
# the conversation's subject.
DEFINITE_FOLLOW_UP_TERMS = 3

REWRITE_PROMPT = (
    "Rewrite the user's last question as one standalone question that can be understood without the "
    "conversation: replace pronouns and references with the names and terms they refer to. Do not answer "
    "it. Reply with the rewritten question only, on one line."
)


def new_conversation_id() -> str:
    return secrets.token_urlsafe(12)


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def key_terms(text: str) -> list[str]:
    """The content words of a question, in order, its names (capitalised words) first: the subject a
    follow-up leans on ("CEO Zentara Robotics"; "March outage payment service")."""
    words = _words(text)
    content: list[str] = []
    seen: set[str] = set()
    for word in words:
        lower = word.lower()
        if lower in _STOP or lower in _VERBS or lower in seen:
            continue
        seen.add(lower)
        content.append(word)
    names = [w for w in content if w[0].isupper() and w != words[0]]
    return (names + [w for w in content if w not in names])[:MAX_KEY_TERMS]


def _is_name(word: str, first: str) -> bool:
    """A capitalised word that is not just the question's first word, nor an acronym ("CEO", "API")."""
    return word != first and word[0].isupper() and any(c.islower() for c in word)


def is_follow_up(question: str, history: tuple[Turn, ...] = ()) -> bool:
    """Whether a question leans on the conversation: it says "it"/"they"; or it brings no name the
    conversation has not seen and is short ("And founded?") or points at a thing with "the" and few words of
    its own ("Who owns the follow-up action?", "What is the budget?"). A question with a new name ("Where
    is Pellucid Bio based?") or a subject of its own ("What does the investment policy say about leverage
    limits?") stands alone."""
    words = _words(question)
    lower = [w.lower() for w in words]
    if any(w in PRONOUNS for w in lower):
        return True
    seen = {w.lower() for turn in history for w in _words(f"{turn.question} {turn.search_query} {turn.answer}")}
    if any(_is_name(w, words[0]) and w.lower() not in seen for w in words):
        return False
    if len(words) <= SHORT_FOLLOW_UP_WORDS:
        return True
    content = [w for w in lower if w not in _STOP and w not in _VERBS]
    own = [w for w in content if w not in seen]
    return "the" in lower and (len(content) <= DEFINITE_FOLLOW_UP_TERMS or len(own) <= 1)


def heuristic_rewrite(question: str, history: tuple[Turn, ...]) -> str:
    """A follow-up (see `is_follow_up`) gets the previous question's key terms appended."""
    if not history or not is_follow_up(question, history):
        return question
    present = {w.lower() for w in _words(question)}
    terms = [t for t in key_terms(history[-1].search_query) if t.lower() not in present]
    return f"{question} {' '.join(terms)}" if terms else question


class QueryRewriter:
    """Turns a follow-up into a standalone search query: with the LLM when there is one (a short prompt),
    else (or when the LLM fails or answers nonsense) with `heuristic_rewrite`."""

    def __init__(self, chat: ChatModel | None = None, max_tokens: int = 96):
        self.chat = chat
        self.max_tokens = max_tokens

    def rewrite(self, question: str, history: tuple[Turn, ...]) -> tuple[str, str]:
        """(search query, how): how is "none" (no history), "llm" or "heuristic"."""
        if not history:
            return question, "none"
        if self.chat is not None:
            try:
                rewritten = self._llm(question, history)
            except FALLBACK_ERRORS as e:
                log.info("query rewrite by %s failed (%s); using the heuristic", self.chat.name, e)
            else:
                if rewritten:
                    return rewritten, "llm"
        return heuristic_rewrite(question, history), "heuristic"

    def _llm(self, question: str, history: tuple[Turn, ...]) -> str | None:
        lines = []
        for turn in history:
            lines += [f"User: {turn.question}", f"Assistant: {turn.answer[:300]}"]
        user = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question}\n\nStandalone question:"
        messages = [ChatMessage("system", REWRITE_PROMPT), ChatMessage("user", user)]
        reply = self.chat.chat(messages, max_tokens=self.max_tokens, temperature=0.0)
        text = next((line.strip() for line in reply.content.splitlines() if line.strip()), "")
        text = _LABEL.sub("", text)
        text = text.strip().strip("\"'`").strip()
        # A model that answers instead of rewriting, or rambles, is not trusted with the search.
        if not text or len(text) > 2 * len(question) + 200:
            return None
        return text
