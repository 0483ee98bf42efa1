"""A backend loads only what it needs: importing one must not drag in another backend's libraries.

Each check runs in a fresh interpreter, so modules other tests imported cannot hide a regression."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _loaded_after(module: str, heavy: list[str]) -> list[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        # PgStore keeps its own BM25 statistics; it shares only the text analysis with LanceStore.
        ("funnel.index.postgres", ["lancedb", "pyarrow", "funnel.index.lance"]),
        # Running a model needs onnxruntime and tokenizers; only building one needs the `onnx` package.
        ("funnel.rerank.onnx_cross_encoder", ["onnx", "funnel.onnx.build"]),
        ("funnel.embed.onnx", ["onnx", "funnel.onnx.build"]),
    ],
)
def test_importing_a_backend_leaves_the_others_unloaded(module, heavy):
    assert _loaded_after(module, heavy) == []
