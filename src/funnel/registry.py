"""Backends chosen by a spec string: one registry per protocol (`rerank.load`, `embed.load`, `generate.load`,
`index.open`).

A spec is a bare name (`lexical`), a name and an argument (`onnx:DIR`, `tei:URL`, `hashing-DIM`), or for a
catch-all backend the argument alone (a model folder, an index directory). Each backend is registered once
with the form its help shows; the CLI's and the settings' help texts and the "unknown …; valid: …" error are
made from those forms, so they cannot drift apart.

A plugin adds a backend with an entry point in the registry's group, e.g. in its pyproject.toml:

    [project.entry-points."funnel.rerankers"]
    myrank = "my_package.rerank:load"

`myrank` and `myrank:ARG` then call `load(ARG, **options)` (ARG is "" for the bare name; options are the
keywords the app passes: a reranker gets model, api_key and timeout_s). A built-in name wins over a plugin's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from funnel.errors import ConfigError

log = logging.getLogger(__name__)
_FORM = re.compile(r"^(?P<prefix>.*?[:\-]/*)?(?P<placeholder>[A-Z][A-Z_]*)$")


@dataclass(frozen=True)
class Backend:
    """One spec form (`onnx:DIR`) and what builds it: `build(argument, **options)`."""

    form: str
    build: Callable[..., object]
    match: Callable[[str], str | None] | None = None  # the argument, or None; default: read from the form

    def argument(self, spec: str) -> str | None:
        """The spec's argument if this backend takes the spec (`""` for a bare name), else None."""
        if self.match is not None:
            return self.match(spec)
        form = _FORM.match(self.form)
        if form is None:
            return "" if spec == self.form else None
        prefix = form.group("prefix") or ""
        return spec[len(prefix):] if spec.startswith(prefix) else None


@dataclass
class Registry:
    """The backends of one protocol. `what` names it in errors ("unknown reranker …")."""

    what: str
    group: str  # the entry-point group plugins register in
    none: bool = False  # `none` (or "") means "no backend" and loads None
    _builtin: list[Backend] = field(default_factory=list)
    _plugins: list[Backend] | None = None

    def register(self, *forms: str, match: Callable[[str], str | None] | None = None):
        """Decorator: `build(argument, **options)` makes the backend for these spec forms."""

        def add(build: Callable[..., object]) -> Callable[..., object]:
            self._builtin.extend(Backend(form, build, match) for form in forms)
            return build

        return add

    def backends(self) -> list[Backend]:
        """Built-in backends in registration order, then plugins'. A catch-all (the argument alone) last."""
        return sorted([*self._builtin, *self._load_plugins()], key=_catch_all)

    def forms(self) -> tuple[str, ...]:
        return (("none",) if self.none else ()) + tuple(b.form for b in self.backends())

    def help(self) -> str:
        """The spec forms for a help text: `none | builtin | onnx:DIR | …`."""
        return " | ".join(self.forms())

    def load(self, spec: str, **options):
        """The backend a spec names (None for `none` where allowed). Unknown spec: ConfigError listing the forms."""
        spec = spec.strip()
        if self.none and spec in ("", "none"):
            return None
        for backend in self.backends():
            argument = backend.argument(spec)
            if argument is not None:
                return backend.build(argument, **options)
        raise ConfigError(f"unknown {self.what} {spec!r}; valid: {', '.join(self.forms())}")

    def _load_plugins(self) -> list[Backend]:
        if self._plugins is None:
            taken = {b.form for b in self._builtin}
            self._plugins = [Backend(ep.name, _lazy(ep), _named(ep.name)) for ep in _entry_points(self.group)
                             if ep.name not in taken and ep.name != "none"]
        return self._plugins

    def forget_plugins(self) -> None:
        """Read the entry points again on next use (after a distribution was installed in this process)."""
        self._plugins = None


def _catch_all(backend: Backend) -> bool:
    form = _FORM.match(backend.form)
    return backend.match is None and form is not None and not form.group("prefix")


def _entry_points(group: str) -> Iterator:
    try:
        yield from entry_points(group=group)
    except Exception:  # a broken distribution's metadata must not break the built-in backends
        log.exception("could not read entry points of %s", group)


def _named(name: str) -> Callable[[str], str | None]:
    def match(spec: str) -> str | None:
        if spec == name:
            return ""
        return spec[len(name) + 1:] if spec.startswith(f"{name}:") else None

    return match


def _lazy(ep) -> Callable[..., object]:
    """The plugin's loader, imported when its backend is first chosen (not when help is shown)."""

    def build(argument: str, **options):
        try:
            loader = ep.load()
        except ImportError as e:
            raise ConfigError(f"the plugin backend {ep.name!r} ({ep.value}) could not be imported: {e}") from e
        return loader(argument, **options)

    return build
