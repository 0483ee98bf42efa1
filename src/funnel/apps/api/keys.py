"""The service's API keys over HTTP, for an admin on every collection (`access.POLICY`):

    GET    /v1/keys/me                                     -> {id, role, collections}: any key, its own
    POST   /v1/keys   {role, collections?, expires_days?, rpm?, upload_mb_per_day?}
                                                           -> 201 {id, key, role, collections, created, expires, ...}
    GET    /v1/keys                                        -> [{id, role, collections, created, expires, revoked, state}]
    DELETE /v1/keys/{key_id}                               -> 204; 404 for an id the store does not know

The key (`key`) is in the 201's body only: the store keeps its hash. A revocation is seen by this process at
once and by every other within the store's cache bound (5 s, `funnel.apps.state.keys.CACHE_TTL_S`).
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from funnel.apps.api.access import principal_of
from funnel.apps.state.keys import KeyVerifier, check_collections, new_key
from funnel.errors import NotFound

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyCreate(BaseModel):
    role: Literal["reader", "writer", "admin"]
    collections: list[str] | None = Field(None, max_length=1000, description="none or left out: every collection")
    expires_days: float | None = Field(None, gt=0, le=36500)
    rpm: int | None = Field(None, ge=0, le=1_000_000, description="requests per minute; 0: unlimited; none: "
                                                                  "the service's default")
    upload_mb_per_day: float | None = Field(None, ge=0, le=10_000_000, description="likewise, upload MiB a day")


class KeyOut(BaseModel):
    id: str
    role: str
    collections: list[str] | Literal["all"]
    created: str
    expires: str | None
    revoked: str | None
    state: str
    rpm: int | None = None
    upload_mb_per_day: float | None = None


class MeOut(BaseModel):
    id: str | None = Field(description="the key's id; `api_key` for the legacy key; null when open")
    role: Literal["reader", "writer", "admin", "open"] = Field(description="open: the service has no keys")
    collections: list[str] | Literal["all"]


class NewKeyOut(KeyOut):
    key: str = Field(description="shown this once; only its hash is kept")


def _verifier(request: Request) -> KeyVerifier:
    return request.app.state.keys


@router.get("/me", response_model=MeOut)
def who_am_i(request: Request) -> MeOut:
    """What the web page may show: the caller's key, its role and its collections (never a secret)."""
    principal = principal_of(request)
    if principal is None:
        return MeOut(id=None, role="open", collections="all")
    names = sorted(principal.collections) if principal.collections is not None else "all"
    return MeOut(id=principal.id, role=principal.role.value, collections=names)


@router.post("", status_code=201, response_model=NewKeyOut)
async def create_key(body: KeyCreate, request: Request) -> NewKeyOut:
    """A key for collections that do not exist is refused (404): see `KeyVerifier.unbind`."""
    check_collections(body.collections, await run_in_threadpool(request.app.state.library.names))
    made = new_key(body.role, body.collections, body.expires_days, rpm=body.rpm,
                   upload_mb_per_day=body.upload_mb_per_day)
    verifier = _verifier(request)
    await run_in_threadpool(verifier.store.add, made.record)
    verifier.forget(made.record.id)
    return NewKeyOut(**made.record.public(time.time()), key=made.token)


@router.get("", response_model=list[KeyOut])
async def list_keys(request: Request) -> list[KeyOut]:
    now = time.time()
    return [KeyOut(**k.public(now)) for k in await run_in_threadpool(_verifier(request).store.list)]


@router.delete("/{key_id}", status_code=204)
async def revoke_key(key_id: str, request: Request) -> Response:
    verifier = _verifier(request)
    record = await run_in_threadpool(verifier.store.revoke, key_id[:64], time.time())
    if record is None:
        raise NotFound(f"no key {key_id[:40]!r}")
    verifier.forget(record.id)
    return Response(status_code=204)
