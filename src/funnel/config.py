"""Core configuration values: plain frozen dataclasses and enum parsing. No environment reading here
(that happens once, at the edge, in `funnel.apps.settings`)."""

from __future__ import annotations

import re
from enum import Enum
from typing import Self, TypeVar

from funnel.errors import ConfigError

E = TypeVar("E", bound=Enum)


def parse_enum(cls: type[E], value: str | E, what: str) -> E:
    """`cls(value)`, with an error that lists the valid values."""
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"unknown {what} {value!r}; valid: {valid}") from None


class Choice(str, Enum):
    """A mode named by a string at the edge: `parse` turns the string into a member, or raises a
    ConfigError naming the valid ones ("unknown rerank policy 'x'; valid: ..."; the class name says what)."""

    @classmethod
    def parse(cls, value: str | Self) -> Self:
        return parse_enum(cls, value, re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower())
