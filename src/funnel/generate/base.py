"""The Generator protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from funnel.types import Answer, SearchResult

# The answer LLM's defaults, written once: `funnel.engine_config.LlmConfig` (the [llm] settings) names these.
LLM_TIMEOUT_S = 60.0  # one call to the LLM server
CONTEXT_TOKENS = 3000  # passages sent to the LLM, in tokens (approx.)
ANSWER_TOKENS = 512  # the longest answer, in tokens
CONTEXT_WINDOW = 4096  # a local model's window (llama.cpp n_ctx): prompt and answer, in the model's tokens


@runtime_checkable
class Generator(Protocol):
    """Answers a question from the documents a search found, citing them by number."""

    name: str

    def answer(self, question: str, result: SearchResult) -> Answer: ...
