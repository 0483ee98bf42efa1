"""A collection's conversations (the ones `ask` remembers, `funnel.apps.state.conversations`):

    GET    /v1/collections/{name}/conversations?limit=&offset=   -> [conversation], most recently updated first
    GET    /v1/collections/{name}/conversations/{id}             -> conversation with its turns
    PATCH  /v1/collections/{name}/conversations/{id}   {title}   -> conversation
    DELETE /v1/collections/{name}/conversations/{id}             -> 204

A conversation is named by its collection and id: an id that is not in this collection (never was, was
forgotten or deleted, or is another collection's) is the same 404, whose body repeats only what the request
said. The store being down is a 503 (`ask` answers without memory instead). Their bodies are declared here,
beside the routes, as the only routes that use them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import AfterValidator, BaseModel, Field

from funnel.apps.api.collections import CollectionDep
from funnel.apps.api.rewrite import CONVERSATION_ID
from funnel.apps.api.schemas import _not_blank
from funnel.apps.state.conversations import (MAX_PAGE, CitedPassage, Conversation, Conversations,
                                             ConversationSummary, Turn)
from funnel.errors import NotFound

router = APIRouter(prefix="/v1/collections", tags=["conversations"])
MAX_TITLE_CHARS = 200
# Past any collection's conversations (`conversations_per_collection`), and far inside SQLite's integers: an
# offset beyond them was an OverflowError, a 500 (issue 40).
MAX_OFFSET = 1_000_000


class ConversationOut(BaseModel):
    id: str
    title: str
    created_at: str
    updated_at: str
    turns: int = Field(description="how many turns are remembered (the last 6 at most)")

    @classmethod
    def of(cls, s: ConversationSummary) -> ConversationOut:
        return cls(id=s.id, title=s.title, created_at=s.created_at, updated_at=s.updated_at, turns=s.turns)


class TurnOut(BaseModel):
    question: str
    search_query: str
    answer: str
    citations: list[CitedPassage] = Field(description="each citation as remembered: its passage's first 500 "
                                                       "characters (the stored record, served as it is)")

    @classmethod
    def of(cls, t: Turn) -> TurnOut:
        return cls(question=t.question, search_query=t.search_query, answer=t.answer,
                   citations=list(t.citations))


class ConversationDetail(ConversationOut):
    history: list[TurnOut] = Field(description="the remembered turns, oldest first")

    @classmethod
    def of_conversation(cls, c: Conversation) -> ConversationDetail:
        return cls(**ConversationOut.of(c.summary).model_dump(), history=[TurnOut.of(t) for t in c.turns])


Title = Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS), AfterValidator(_not_blank)]


class ConversationRename(BaseModel):
    title: Title


def _store(request: Request) -> Conversations:
    return request.app.state.conversations


def _missing(name: str, conversation_id: str) -> NotFound:
    return NotFound(f"no conversation {conversation_id[:64]!r} in collection {name!r}")


def _checked(name: str, conversation_id: str) -> str:
    if not CONVERSATION_ID.match(conversation_id):  # no such conversation can exist
        raise _missing(name, conversation_id)
    return conversation_id


@router.get("/{name}/conversations", response_model=list[ConversationOut])
def list_conversations(
    coll: CollectionDep, request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> list[ConversationOut]:
    return [ConversationOut.of(s) for s in _store(request).list(coll.name, limit, offset)]


@router.get("/{name}/conversations/{conversation_id}", response_model=ConversationDetail)
def get_conversation(conversation_id: str, coll: CollectionDep, request: Request) -> ConversationDetail:
    found = _store(request).get(coll.name, _checked(coll.name, conversation_id))
    if found is None:
        raise _missing(coll.name, conversation_id)
    return ConversationDetail.of_conversation(found)


@router.patch("/{name}/conversations/{conversation_id}", response_model=ConversationOut)
def rename_conversation(
    conversation_id: str, body: ConversationRename, coll: CollectionDep, request: Request
) -> ConversationOut:
    renamed = _store(request).rename(coll.name, _checked(coll.name, conversation_id), body.title)
    if renamed is None:
        raise _missing(coll.name, conversation_id)
    return ConversationOut.of(renamed)


@router.delete("/{name}/conversations/{conversation_id}", status_code=204)
def delete_conversation(conversation_id: str, coll: CollectionDep, request: Request) -> Response:
    if not _store(request).delete(coll.name, _checked(coll.name, conversation_id)):
        raise _missing(coll.name, conversation_id)
    return Response(status_code=204)
