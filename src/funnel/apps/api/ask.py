"""`POST /v1/collections/{name}/ask`: an answer with numbered citations, as JSON or as server-sent events.

Request: {question, k?, policy?, conversation_id?, stream?, documents?} (documents: only those, see
`funnel.apps.api.scope`). The question is first rewritten with the
conversation's history (see `funnel.apps.state.conversations`), the rewrite is searched, and the generator
answers it. A conversation belongs to the collection it was asked in: an id the collection does not know
starts a new conversation there under that id, owned by the key that asked. Every reader of the collection
may read a conversation; continuing one (adding a turn) is for the key that started it and for writers and
admins of the collection: a reader continuing another key's conversation gets 403 (issue 40: a reader could
append to anyone's).

When the conversation store is down (the service database unreachable, the SQLite file unwritable) the
question is answered as asked, without the conversation's history, and the turn is not remembered: the
answer is flagged `no_memory` and `memory_note` says why. A follow-up answered that way may answer a
different question than the one meant, which the note tells the reader; the alternative, a 503, leaves
them with no answer at all.

Streaming (`stream: true`, or `Accept: text/event-stream` when `stream` is left out) sends:

    event: meta   {conversation_id, question, search_query, rewritten_by, rerank_status, rerank_reason,
                   policy, sources, timings_ms}
    event: quote  {citations}            (a reader's answer only: the picker's sentences, shown while it reads)
    event: delta  {text}                 (many)
    event: done   {the whole JSON answer}
    event: error  {detail}               (instead of done, when the answer could not be finished)

An LLM that dies before its first word is replaced by the extractive answer (`fallback_reason` says why);
one that dies mid-answer ends with its "[answer interrupted: ...]" delta and a `done` flagged
"interrupted". Errors before the stream starts (unknown collection, nothing indexed) are plain JSON errors.

The generator is synchronous, so a producer thread owns it: it pulls the deltas and hands them to the event
loop through a queue. When the client goes away the response is cancelled, the producer is told to stop,
and it closes the generator itself after the delta in hand (which drops the LLM's connection): a generator
must not be closed from another thread while one is inside it, which rules out closing it from the
cancelled coroutine while `iterate_in_threadpool` is still waiting on `next()`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from funnel.apps.api.access import principal_of
from funnel.apps.api.collections import collection as get_collection
from funnel.apps.api.rewrite import QueryRewriter, new_conversation_id
from funnel.apps.api.schemas import AskRequest, AskResponse, CitationOut, SourceOut
from funnel.apps.api.errors import Forbidden
from funnel.apps.state.conversations import OPEN_OWNER, CitedPassage, Conversations, Turn
from funnel.apps.state.keys import Role
from funnel.apps.state.metrics import STAGES
from funnel.errors import FunnelError, StoreError
from funnel.generate.context import with_continuations
from funnel.generate.llm import AnswerStream
from funnel.generate.step import AnswerStep
from funnel.types import Answer, SearchResult

log = logging.getLogger("funnel.api")

# With nothing to send for this long, a comment line keeps proxies from closing the connection (and, on
# servers that report a gone client only when writing, finds out).
KEEPALIVE_S = 10.0
router = APIRouter(prefix="/v1/collections", tags=["ask"])
NO_MEMORY_NOTE = ("the conversation's memory is unavailable: answered as asked, without earlier turns, and "
                  "not remembered")
NOT_REMEMBERED_NOTE = "the conversation's memory is unavailable: this turn is not remembered"


@dataclass(frozen=True)
class Prepared:
    """Everything decided before the answer is written."""

    question: str
    conversation_id: str
    collection: str
    rewritten_by: str
    result: SearchResult
    timings_ms: dict[str, float]
    step: AnswerStep  # the answer step: the service's generator, or the abstainer when the evidence falls short
    memory_note: str = ""  # why the conversation's history could not be read
    owner: str = OPEN_OWNER  # who asked: the owner of a conversation this turn starts


def _citations(answer: Answer) -> tuple[CitedPassage, ...]:
    return tuple(CitedPassage(c.number, c.chunk_id, c.doc_id, c.path, c.title, c.location, c.text, c.page)
                 for c in answer.citations)


def _prepare(request: Request, name: str, body: AskRequest) -> Prepared:
    state = request.app.state
    coll = get_collection(name, request)
    conversations: Conversations = state.conversations
    rewriter: QueryRewriter = state.rewriter
    scope = coll.scope(body.documents)  # an unknown document: 404 before anything is remembered
    conversation_id = body.conversation_id or new_conversation_id()
    principal = principal_of(request)
    owner = principal.id if principal is not None else OPEN_OWNER
    t0 = time.perf_counter()
    try:
        started_by = conversations.owner(coll.name, conversation_id) if body.conversation_id else None
        if started_by not in (None, owner) and principal is not None and not principal.may(Role.WRITER):
            raise Forbidden(f"conversation {conversation_id!r} was started by another key: a reader continues "
                            "only its own (leave conversation_id out to start one)")
        history, memory_note = conversations.history(coll.name, conversation_id), ""
    except StoreError as e:
        log.warning("answering without conversation memory: %s", e)
        history, memory_note = (), f"{NO_MEMORY_NOTE} ({e})"
    search_query, how = rewriter.rewrite(body.question, history)
    rewrite_ms = 1000 * (time.perf_counter() - t0)
    # The answer's context, as `Pipeline.ask` builds it: a lead-in's list comes with it.
    result = coll.search(search_query, k=body.k, policy=body.policy, filter=scope)
    result = with_continuations(result, coll.store)
    timings = dict(result.timings_ms)
    if how != "none":
        timings["rewrite"] = rewrite_ms
    step = coll.pipeline.prepare(result, state.generator)
    return Prepared(body.question, conversation_id, coll.name, how, result, timings, step, memory_note, owner)


def _finish(request: Request, prepared: Prepared, answer: Answer, generate_ms: float) -> AskResponse:
    state = request.app.state
    timings = {**prepared.timings_ms, "generate": generate_ms}
    state.metrics.observe({k: v for k, v in timings.items() if k in STAGES})
    note = prepared.memory_note
    if "interrupted" not in answer.flags and not note:
        turn = Turn(prepared.question, prepared.result.query, answer.text, _citations(answer))
        try:
            state.conversations.add(prepared.collection, prepared.conversation_id, turn, prepared.owner)
        except StoreError as e:
            log.warning("the answer is not remembered: %s", e)
            note = f"{NOT_REMEMBERED_NOTE} ({e})"
    if note:
        answer = replace(answer, flags=(*answer.flags, "no_memory"))
    response = AskResponse.of(
        prepared.question, answer, prepared.result, prepared.conversation_id, prepared.rewritten_by, timings
    )
    return response.model_copy(update={"memory_note": note}) if note else response


def _wants_stream(request: Request, body: AskRequest) -> bool:
    if body.stream is not None:
        return body.stream
    return "text/event-stream" in request.headers.get("accept", "")


@router.post(
    "/{name}/ask",
    response_model=AskResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when streaming"}},
)
async def ask(name: str, body: AskRequest, request: Request):
    prepared = await run_in_threadpool(_prepare, request, name, body)
    if not _wants_stream(request, body):
        t0 = time.perf_counter()
        answer = await run_in_threadpool(prepared.step.answer)
        # In a thread: remembering the turn may be a database write (`funnel serve --database`).
        return await run_in_threadpool(_finish, request, prepared, answer, 1000 * (time.perf_counter() - t0))
    stream = prepared.step.stream()
    return StreamingResponse(
        _events(request, prepared, stream),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _meta(prepared: Prepared) -> dict:
    result = prepared.result
    return {
        "conversation_id": prepared.conversation_id,
        "question": prepared.question,
        "search_query": result.query,
        "rewritten_by": prepared.rewritten_by,
        "rerank_status": result.rerank_status.value,
        "rerank_reason": result.rerank_reason,
        "policy": result.policy,
        "sources": [SourceOut.of(d).model_dump() for d in result.documents],
        "timings_ms": {k: round(v, 3) for k, v in prepared.timings_ms.items()},
        **({"memory_note": prepared.memory_note} if prepared.memory_note else {}),
    }


async def _events(request: Request, prepared: Prepared, stream: AnswerStream) -> AsyncIterator[str]:
    yield sse("meta", _meta(prepared))
    try:
        quote = await run_in_threadpool(prepared.step.quote)
    except Exception as e:  # the quote is extra: a picker that fails here leaves the answer to the stream
        log.warning("no quote for the answer: %s", e, exc_info=not isinstance(e, FunnelError))
        quote = ()
    if quote:
        yield sse("quote", {"citations": [CitationOut.of(c).model_dump() for c in quote]})
    producer = _Producer(stream, asyncio.get_running_loop())
    started = time.perf_counter()
    try:
        while True:
            try:
                kind, payload = await asyncio.wait_for(producer.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield ": keep-alive\n\n"
                continue
            if kind == "delta":
                yield sse("delta", {"text": payload})
            elif kind == "done":
                ms = 1000 * (time.perf_counter() - started)
                try:
                    response = await run_in_threadpool(_finish, request, prepared, payload, ms)
                except FunnelError as e:  # a store that is down is a note in the answer; anything else ends here
                    yield sse("error", {"detail": str(e)})
                    return
                yield sse("done", response.model_dump())
                return
            else:
                yield sse("error", {"detail": payload})
                return
    finally:
        producer.stop()  # the client left (cancelled), or the answer ended: either way, no more deltas


class _Producer:
    """Runs the answer stream on its own thread; ("delta", text)... then ("done", Answer) or ("error", msg)
    arrive on `queue`. `stop()` makes it close the stream after the delta in hand."""

    def __init__(self, stream: AnswerStream, loop: asyncio.AbstractEventLoop):
        self.queue: asyncio.Queue = asyncio.Queue()
        self._stream = stream
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="funnel-ask-stream", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _emit(self, kind: str, payload) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, (kind, payload))
        except RuntimeError:  # the loop is closed: the server is shutting down
            self._stop.set()

    def _run(self) -> None:
        try:
            for delta in self._stream:
                if self._stop.is_set():
                    return
                self._emit("delta", delta)
            if not self._stop.is_set():
                self._emit("done", self._stream.answer)
        except FunnelError as e:
            self._emit("error", str(e))
        except Exception as e:  # never a hung client: a bug in a generator still ends the stream
            log.error("the answer stream failed", exc_info=e)
            self._emit("error", "internal error while writing the answer")
        finally:
            self._stream.close()
