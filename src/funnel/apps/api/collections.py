"""Collections, their documents and chunks, and search over them.

    POST   /v1/collections                             {name} -> 201 collection
    GET    /v1/collections                             -> [collection]  (`default` always listed)
    DELETE /v1/collections/{name}                      -> 204 (its running ingest cancelled, not waited for;
                                                           its conversations forgotten)
    POST   /v1/collections/{name}/documents            multipart, field `file` (one or more) -> 202 [document]
    GET    /v1/collections/{name}/documents            -> [document]
    GET    /v1/collections/{name}/documents/{id}       -> document
    DELETE /v1/collections/{name}/documents/{id}       -> 204 (file and chunks gone; a queued or ingesting
                                                           document is never written: its ingest is cancelled)
    GET    /v1/collections/{name}/documents/{id}/file  -> the original file, its own content type
    GET    /v1/collections/{name}/chunks/{chunk_id}    -> the passage a citation names (`#` sent as %23)
    POST   /v1/collections/{name}/search               {query, k?, policy?, explain?, documents?} -> results,
                                                           explained (documents: see `scope`)
    GET    /v1/collections/{name}/calibration          -> {state, message, option, reason, created?, error?}
    POST   /v1/collections/{name}/calibrate            -> 202 the same (queued; 409 with nothing indexed)

A collection calibrates by itself after each batch of changes; `calibrate` is the page's Calibrate button.

A watched folder's documents (`funnel serve --watch`) are named by their paths: document and chunk ids may
hold '/' (sent as %2F or as is). Such a collection refuses uploads and deletes (409).

Routes are plain `def`: FastAPI runs them in its threadpool (file I/O, the store, the embedder are sync).
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Request, Response, UploadFile
from fastapi.responses import FileResponse

from funnel.apps.api.access import principal_of, visible
from funnel.apps.api.library import Collection, Library
from funnel.apps.api.schemas import (
    ChunkOut,
    CollectionCreate,
    CollectionOut,
    DocumentOut,
    SearchRequest,
    SearchResponse,
)
from funnel.apps.api.uploads import BY_SUFFIX, MEDIA_TYPES
from funnel.apps.state.files import Upload
from funnel.errors import StoreError

log = logging.getLogger("funnel.api")


def library(request: Request) -> Library:
    return request.app.state.library


def collection(name: str, request: Request) -> Collection:
    return library(request).get(name)


LibraryDep = Annotated[Library, Depends(library)]
CollectionDep = Annotated[Collection, Depends(collection)]
router = APIRouter(prefix="/v1/collections", tags=["collections"])


@router.post("", status_code=201, response_model=CollectionOut, response_model_exclude_none=True)
def create_collection(body: CollectionCreate, lib: LibraryDep, request: Request) -> CollectionOut:
    """A new collection starts with no key naming it (keys made for a deleted one under the name included)."""
    return CollectionOut(**lib.create(body.name, before=request.app.state.keys.unbind).summary())


@router.get("", response_model=list[CollectionOut], response_model_exclude_none=True)
def list_collections(lib: LibraryDep, request: Request) -> list[CollectionOut]:
    """The collections the request's key covers (all of them for an admin, or when the service is open)."""
    return [CollectionOut(**lib.get(name).summary()) for name in visible(principal_of(request), lib.names())]


@router.delete("/{name}", status_code=204)
def delete_collection(name: str, lib: LibraryDep, request: Request) -> Response:
    lib.delete(name)
    state = request.app.state
    try:  # a collection made again under the name starts without them
        state.conversations.forget_collection(name)
    except StoreError as e:
        log.warning("the conversations of deleted collection %r stay: %s", name, e)
    try:  # its keys stop naming it (making it again takes the name off them too, failing closed)
        state.keys.unbind(name)
    except StoreError as e:
        log.warning("keys still name deleted collection %r until it is made again: %s", name, e)
    return Response(status_code=204)


@router.post("/{name}/documents", status_code=202, response_model=list[DocumentOut])
def upload_documents(
    coll: CollectionDep, file: Annotated[list[UploadFile], File(description=f"files: {', '.join(BY_SUFFIX)}")]
) -> list[DocumentOut]:
    """Save the files and queue them for ingestion (one at a time, in the background); poll the documents
    for `status` ready or failed."""
    uploads = [Upload(f.filename or "", f.file, _size(f)) for f in file]
    return [DocumentOut.of(r) for r in coll.add(uploads)]


@router.get("/{name}/documents", response_model=list[DocumentOut])
def list_documents(coll: CollectionDep) -> list[DocumentOut]:
    return [DocumentOut.of(r) for r in coll.documents()]


@router.get("/{name}/documents/{doc_id:path}/file", response_class=FileResponse)
def document_file(doc_id: str, coll: CollectionDep) -> Response:
    record = coll.document(doc_id)
    content, media_type = coll.file_content(record), MEDIA_TYPES[record.kind]
    if isinstance(content, bytes):  # kept in the service database
        disposition = f"inline; filename*=utf-8''{quote(record.filename)}"
        return Response(content, media_type=media_type, headers={"Content-Disposition": disposition})
    return FileResponse(content, media_type=media_type, filename=record.filename, content_disposition_type="inline")


@router.get("/{name}/documents/{doc_id:path}", response_model=DocumentOut)
def get_document(doc_id: str, coll: CollectionDep) -> DocumentOut:
    return DocumentOut.of(coll.document(doc_id))


@router.delete("/{name}/documents/{doc_id:path}", status_code=204)
def delete_document(doc_id: str, coll: CollectionDep) -> Response:
    coll.delete_document(doc_id)
    return Response(status_code=204)


@router.get("/{name}/chunks/{chunk_id:path}", response_model=ChunkOut)
def get_chunk(chunk_id: str, coll: CollectionDep) -> ChunkOut:
    return ChunkOut.of(coll.chunk(chunk_id))


@router.post("/{name}/search", response_model=SearchResponse)
def search(body: SearchRequest, coll: CollectionDep, request: Request) -> SearchResponse:
    result = coll.search(body.query, k=body.k, policy=body.policy, filter=coll.scope(body.documents))
    request.app.state.metrics.observe(result.timings_ms)
    return SearchResponse.of(result, explain=body.explain)


@router.get("/{name}/calibration")
def calibration(coll: CollectionDep) -> dict:
    """What `auto` does on this collection and why, whether a calibration is queued or running, and a line
    for a person (`state`: calibrating, calibrated, changed, not_calibrated, empty)."""
    return coll.calibration_status()


@router.post("/{name}/calibrate", status_code=202)
def calibrate(coll: CollectionDep) -> dict:
    """Queue a calibration of the collection as it now is (none is added while one is queued or running);
    poll `calibration` for its end."""
    return coll.calibrate()


def _size(upload: UploadFile) -> int:
    if upload.size is not None:
        return upload.size
    upload.file.seek(0, 2)
    size = upload.file.tell()
    upload.file.seek(0)
    return size
