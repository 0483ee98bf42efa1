"""What the sentence-transformers embedder and cross-encoder share (optional extra: funnel[torch]): loading
a model class by name, with a missing package or an unloadable model said in one line."""

from __future__ import annotations

from typing import Any

from funnel.errors import BackendUnavailable, missing_dependency


def load_sentence_transformers(class_name: str, model: str, what: str, label: str, **kwargs: Any) -> Any:
    """`sentence_transformers.<class_name>(model, **kwargs)`. `what` names the backend when the package is
    missing, `label` the model when it cannot be loaded."""
    try:
        import sentence_transformers
    except ImportError as e:
        raise missing_dependency(what, "sentence-transformers", "torch") from e
    try:
        return getattr(sentence_transformers, class_name)(model, **kwargs)
    except Exception as e:  # hub unreachable, bad path: one line, not a traceback
        raise BackendUnavailable(f"cannot load {label} {model!r}: {e}") from e


class SentenceTransformersModel:
    """A sentence-transformers model named by hub name or path, loaded on `warm_up()` or first use. A
    subclass names the class to load (`CLASS`), itself (`WHAT`, `LABEL`) and extra arguments (`_options`)."""

    CLASS = ""
    WHAT = ""
    LABEL = ""

    def __init__(self, model: str, device: str, batch_size: int):
        self.model_name = model
        self.name = f"st:{model}"
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    def _options(self) -> dict[str, Any]:
        return {}

    def warm_up(self) -> None:
        if self._model is not None:
            return
        self._model = load_sentence_transformers(
            self.CLASS, self.model_name, self.WHAT, self.LABEL, device=self.device, **self._options()
        )
