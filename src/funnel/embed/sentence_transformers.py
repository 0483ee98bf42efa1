"""Any sentence-transformers model by hub name or local path (optional extra: funnel[torch])."""

from __future__ import annotations

import numpy as np

from funnel.torch_runtime import SentenceTransformersModel


class SentenceTransformerEmbedder(SentenceTransformersModel):
    CLASS, WHAT, LABEL = "SentenceTransformer", "the sentence-transformers embedder", "sentence-transformers model"

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32):
        super().__init__(model, device, batch_size)

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
