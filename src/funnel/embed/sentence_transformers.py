"""Any sentence-transformers model by hub name or local path (optional extra: funnel[torch])."""

from __future__ import annotations

import numpy as np

from funnel.errors import BackendUnavailable, missing_dependency


class SentenceTransformerEmbedder:
    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32):
        self.model_name = model
        self.name = f"st:{model}"
        self.device = device
        self.batch_size = batch_size
        self._model = None

    def warm_up(self) -> None:
        if self._model is not None:
            return
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise missing_dependency("the sentence-transformers embedder", "sentence-transformers", "torch") from e
        try:
            self._model = SentenceTransformer(self.model_name, device=self.device)
        except Exception as e:  # hub unreachable, bad path: one line, not a traceback
            raise BackendUnavailable(f"cannot load sentence-transformers model {self.model_name!r}: {e}") from e

    @property
    def dim(self) -> int:
        self.warm_up()
        return int(self._model.get_sentence_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        self.warm_up()
        return int(self._model.max_seq_length) - 2

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        self.warm_up()
        encoding = self._model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [tuple(o) for o in encoding["offset_mapping"]]

    def count_tokens(self, text: str) -> int:
        return len(self.token_offsets(text))

    def embed(self, texts: list[str]) -> np.ndarray:
        self.warm_up()
        vectors = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)
