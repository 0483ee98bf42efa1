"""The backend registries: forms made from the registrations, and a plugin found through a real entry point
(a distribution written on the fly into a folder on sys.path, as pip would install it)."""

from __future__ import annotations

import sys

import pytest

from funnel import embed, generate, index, rerank
from funnel.errors import ConfigError
from funnel.rerank.lexical import LexicalReranker

PLUGIN = '''
from funnel.rerank.lexical import LexicalReranker


class Shouty(LexicalReranker):
    def __init__(self, argument, **options):
        self.name = f"shouty:{argument}"
        self.options = options


def load(argument, **options):
    return Shouty(argument, **options)
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """`funnel-shouty`, registering reranker `shouty` in group funnel.rerankers."""
    (tmp_path / "funnel_shouty.py").write_text(PLUGIN)
    info = tmp_path / "funnel_shouty-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: funnel-shouty\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[funnel.rerankers]\nshouty = funnel_shouty:load\nlexical = x:y\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rerank.REGISTRY.forget_plugins()
    yield
    sys.modules.pop("funnel_shouty", None)
    monkeypatch.undo()
    rerank.REGISTRY.forget_plugins()


def test_forms_are_the_registrations_in_order():
    assert rerank.REGISTRY.forms()[:5] == ("none", "builtin", "onnx:DIR", "st:MODEL", "lexical")
    assert generate.REGISTRY.forms() == ("none", "ollama:URL", "openai:URL", "local", "local:PATH")
    assert embed.REGISTRY.forms()[-1] == "DIR" and index.REGISTRY.forms()[-1] == "DIR"  # catch-alls last
    assert rerank.RERANKER_SPECS == rerank.REGISTRY.forms()


def test_the_help_texts_come_from_the_registry():
    from funnel.apps.settings import Settings

    from funnel.apps.settings import SECTION_MODELS

    assert rerank.REGISTRY.help() in SECTION_MODELS["rerank"].model_fields["backend"].description
    assert generate.REGISTRY.help() in SECTION_MODELS["llm"].model_fields["backend"].description
    assert embed.REGISTRY.help() in Settings.model_fields["embedder"].description


def test_old_names_load_the_same_backends(tmp_path):
    from funnel.apps.factory import build_reranker

    assert rerank.load_reranker is rerank.load and build_reranker is rerank.load
    assert embed.load_embedder is embed.load and index.open_store is index.open
    assert isinstance(rerank.load(" lexical "), LexicalReranker) and rerank.load("none") is None
    assert embed.load("hashing-64").embed(["x"]).shape == (1, 64)
    assert type(index.open(tmp_path / "idx")).__name__ == "LanceStore"
    with pytest.raises(ConfigError, match="^unknown llm 'gpt'; valid: none, ollama:URL, openai:URL, local, local:PATH$"):
        generate.load("gpt")


def test_a_plugin_registers_a_reranker_through_an_entry_point(installed_plugin):
    assert "shouty" in rerank.REGISTRY.forms() and "shouty" in rerank.REGISTRY.help()
    backend = rerank.load("shouty:LOUD", timeout_s=3)
    assert backend.name == "shouty:LOUD" and backend.options["timeout_s"] == 3
    assert rerank.load("shouty").name == "shouty:"
    assert isinstance(rerank.load("lexical"), LexicalReranker)  # a built-in name is not taken over
    with pytest.raises(ConfigError, match="valid: .*shouty"):
        rerank.load("whisper")


def test_no_plugin_without_the_distribution():
    rerank.REGISTRY.forget_plugins()
    assert "shouty" not in rerank.REGISTRY.forms()
