"""Pipeline variants evaluated side by side: `{bm25|dense|hybrid}[+rerank(POLICY)]`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from funnel.errors import ConfigError
from funnel.rerank.policies import RerankPolicy
from funnel.retrieve.first_stage import Retrieval

DEFAULT = (
    "bm25,dense,hybrid,hybrid+rerank(replace),hybrid+rerank(guaranteed_slots),hybrid+rerank(rrf)"
)
_SPEC = re.compile(r"^(?P<base>[a-z0-9]+)(?:\+rerank\((?P<policy>[a-z_]+)\))?$")


@dataclass(frozen=True)
class Variant:
    name: str
    retrieval: Retrieval
    policy: RerankPolicy  # NONE: first stage only

    @property
    def reranks(self) -> bool:
        return self.policy is not RerankPolicy.NONE

    @classmethod
    def parse(cls, spec: str) -> Variant:
        spec = spec.strip()
        match = _SPEC.match(spec)
        if not match:
            raise ConfigError(
                f"bad variant {spec!r}; expected bm25, dense or hybrid, optionally +rerank(POLICY), "
                f"e.g. hybrid+rerank(guaranteed_slots)"
            )
        retrieval = Retrieval.parse(match["base"])
        policy = RerankPolicy.parse(match["policy"]) if match["policy"] else RerankPolicy.NONE
        return cls(spec, retrieval, policy)


def parse_variants(specs: str) -> list[Variant]:
    variants = [Variant.parse(s) for s in specs.split(",") if s.strip()]
    if not variants:
        raise ConfigError("no variants given")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"a variant is listed twice: {', '.join(names)}")
    return variants
