"""`POST /v1/embeddings`: funnel's embedder behind OpenAI's embeddings API, so other tools (an OpenAI client,
LangChain's or LlamaIndex's OpenAI embeddings, an editor plugin) can share the model funnel already loaded.

Request and response follow OpenAI's shape: `{model, input, encoding_format?, dimensions?, user?}` in;
`{object: "list", data: [{object: "embedding", index, embedding}], model, usage}` out. `encoding_format`
`base64` (what the official Python client asks for by default) returns little-endian float32 bytes.

Where funnel differs from OpenAI, it says so instead of guessing:
- `model` may be left out, or name the served embedder (its spec, its name, or its Hugging Face name); any
  other model is a 404 that names the one served. One server embeds with one model.
- An input longer than the model reads (`max_tokens`) is a 400, as OpenAI answers one over its context;
  nothing is cut silently.
- Token-id inputs (lists of integers) are refused: they would be ids of another tokenizer.
- `dimensions` may only be the model's own (MiniLM is not trained to be cut shorter).
- At most 256 inputs per request (OpenAI takes 2,048: one such call held the CPU 22 s, issue 40), 32,000
  characters each and 2,000,000 in all; over one, a 422 naming it. 256 inputs at MiniLM's full window embed in
  a few seconds on 2 cores. An input is refused anyway past the model's window (at most 512 tokens for
  funnel's embedders), which ordinary text fits in well under 32,000 characters: the cap only spares
  tokenizing what would be refused. LangChain's OpenAIEmbeddings sends 1,000 texts a call by default: give it
  `chunk_size=256`. Calls are also counted per key (`[serve] compute_rpm`, `funnel.apps.api.limits`).
"""

from __future__ import annotations

import base64
from typing import Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, field_validator

from funnel.apps.api.errors import status_for
from funnel.errors import ConfigError, FunnelError, NotFound

MAX_INPUTS = 256
MAX_INPUT_CHARS = 32_000
MAX_TOTAL_CHARS = 2_000_000
SLICE = 64  # texts embedded per model call: bounded memory for a full request


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request. Unknown fields are ignored, as OpenAI-compatible servers do."""

    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="a text or a list of texts (token-id arrays are refused: they belong to another tokenizer)"
    )
    model: str | None = Field(None, description="the served embedder, or leave it out")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="only the model's own dimension is accepted")
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _texts(cls, value):
        texts = [value] if isinstance(value, str) else value
        if not texts:
            raise ValueError("input is empty: send a text or a list of texts")
        if any(not isinstance(t, str) for t in texts):
            raise ValueError("token-id input is not supported: send text (funnel tokenizes it for its model)")
        if len(texts) > MAX_INPUTS:
            raise ValueError(f"input has {len(texts)} texts; the limit is {MAX_INPUTS} per request")
        for i, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"input[{i}] is empty")
            if len(text) > MAX_INPUT_CHARS:
                raise ValueError(f"input[{i}] has {len(text)} characters; the limit is {MAX_INPUT_CHARS}")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"input[{i}] is not valid Unicode text (a lone surrogate)") from None
        if sum(len(t) for t in texts) > MAX_TOTAL_CHARS:
            raise ValueError(f"input passes {MAX_TOTAL_CHARS} characters in all; the limit is per request")
        return texts


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


def served_names(spec: str, name: str) -> set[str]:
    """The model names a request may use for the served embedder: its spec (`minilm`), its name
    (`all-MiniLM-L6-v2-int8`) and the Hugging Face name it is built from (`sentence-transformers/...`)."""
    base = name.removesuffix("-int8")
    return {spec, name, base, f"sentence-transformers/{base}", f"sentence-transformers/{name}"}


def _check_model(requested: str | None, spec: str, embedder) -> None:
    if requested and requested not in served_names(spec, embedder.name):
        raise NotFound(
            f"model {requested!r} is not served here; this server embeds with {embedder.name} "
            f"(dim {embedder.dim}): leave model out or name that one"
        )


def _token_counts(embedder, texts: list[str]) -> list[int]:
    counts = [embedder.count_tokens(t) for t in texts]
    for i, n in enumerate(counts):
        if n > embedder.max_tokens:
            raise ConfigError(
                f"input[{i}] is {n} tokens; {embedder.name} reads at most {embedder.max_tokens}: "
                "split it (funnel's own chunks fit)"
            )
    return counts


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.astype(float).tolist()


class OpenAIErrors(APIRoute):
    """Errors in OpenAI's shape as well as funnel's: OpenAI clients show `error.message` and nothing else, so
    the body carries `{"error": {"message", "type", ...}}` beside funnel's one-line `detail`."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request: Request):
            try:
                return await handler(request)
            except RequestValidationError as e:
                problems = [f"{'.'.join(map(str, p['loc'][1:])) or 'body'}: {p['msg']}" for p in e.errors()]
                message = "; ".join(p.removesuffix(".").replace("Value error, ", "") for p in problems)
                return _openai_error(" ".join(message.split()), "invalid_request_error", 422)
            except FunnelError as e:
                return _openai_error(str(e), type(e).__name__, status_for(e))

        return route


def _openai_error(message: str, kind: str, status: int) -> JSONResponse:
    body = {"detail": message, "error": {"message": message, "type": kind, "param": None, "code": None}}
    return JSONResponse(body, status_code=status)


router = APIRouter(tags=["embeddings"], route_class=OpenAIErrors)


@router.post("/v1/embeddings", response_model=EmbeddingsResponse)
def embeddings(body: EmbeddingsRequest, request: Request) -> EmbeddingsResponse:
    """OpenAI-compatible embeddings from funnel's embedder (L2-normalised vectors, as OpenAI's are)."""
    embedder = request.app.state.embedder
    _check_model(body.model, request.app.state.embedder_spec, embedder)
    if body.dimensions is not None and body.dimensions != embedder.dim:
        raise ConfigError(f"dimensions must be {embedder.dim} for {embedder.name}, got {body.dimensions}")
    texts: list[str] = body.input  # a list of texts once validated
    counts = _token_counts(embedder, texts)
    data = []
    for start in range(0, len(texts), SLICE):
        vectors = embedder.embed(texts[start : start + SLICE])
        data += [
            Embedding(index=start + i, embedding=_encode(v, body.encoding_format)) for i, v in enumerate(vectors)
        ]
    total = sum(counts)
    return EmbeddingsResponse(data=data, model=embedder.name, usage=Usage(prompt_tokens=total, total_tokens=total))

