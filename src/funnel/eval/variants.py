"""Pipeline variants evaluated side by side: `{bm25|dense|hybrid}[+rerank(POLICY[:WEIGHT][|gate:GATE])]`, and
`default`: exactly what `funnel search` returns with the settings and the index's calibration in force."""

from __future__ import annotations

import re
from dataclasses import dataclass

from funnel.errors import ConfigError
from funnel.rerank.policies import RerankPolicy
from funnel.retrieve.first_stage import Retrieval

DEFAULT = (
    "bm25,dense,hybrid,hybrid+rerank(replace),hybrid+rerank(guaranteed_slots),hybrid+rerank(rrf),default"
)
DEFAULT_VARIANT = "default"
_SPEC = re.compile(
    r"^(?P<base>[a-z0-9]+)(?:\+rerank\((?P<policy>[a-z_]+)(?::(?P<weight>[0-9.]+))?(?:\|gate:(?P<gate>[0-9.]+))?\))?$"
)


@dataclass(frozen=True)
class Variant:
    name: str
    retrieval: Retrieval
    policy: RerankPolicy  # NONE: first stage only
    weight: float = 1.0  # the reranker's weight under rrf
    gate: float | None = None  # under rrf: the lead the reranker's best score needs (None: the setting's)

    @property
    def reranks(self) -> bool:
        return self.policy is not RerankPolicy.NONE and not self.is_default

    @property
    def is_default(self) -> bool:
        """`default` runs `Pipeline.search` itself: policy and weights come from the settings and calibration."""
        return self.name == DEFAULT_VARIANT

    @classmethod
    def parse(cls, spec: str) -> Variant:
        spec = spec.strip()
        if spec == DEFAULT_VARIANT:
            return cls(spec, Retrieval.HYBRID, RerankPolicy.NONE)
        match = _SPEC.match(spec)
        if not match:
            raise ConfigError(
                f"bad variant {spec!r}; expected bm25, dense or hybrid, optionally +rerank(POLICY), "
                "e.g. hybrid+rerank(guaranteed_slots), hybrid+rerank(rrf:0.5) or hybrid+rerank(rrf:1|gate:0.2), "
                "or default"
            )
        retrieval = Retrieval.parse(match["base"])
        if retrieval is Retrieval.AUTO:
            raise ConfigError(f"bad variant {spec!r}: the calibrated first stage is the `default` variant")
        policy = RerankPolicy.parse(match["policy"]) if match["policy"] else RerankPolicy.NONE
        if policy is RerankPolicy.AUTO:
            raise ConfigError(f"bad variant {spec!r}: the calibrated policy is the `default` variant")
        weight, gate = 1.0, None
        for part in ("weight", "gate"):
            if match[part] is None:
                continue
            if policy is not RerankPolicy.RRF:
                raise ConfigError(f"bad variant {spec!r}: only rrf takes a {part}, e.g. hybrid+rerank(rrf:0.5) "
                                  "or hybrid+rerank(rrf:1|gate:0.2)")
            try:
                value = float(match[part])
            except ValueError:
                raise ConfigError(f"bad variant {spec!r}: {match[part]!r} is not a number") from None
            weight, gate = (value, gate) if part == "weight" else (weight, value)
        return cls(spec, retrieval, policy, weight, gate)


def parse_variants(specs: str) -> list[Variant]:
    variants = [Variant.parse(s) for s in specs.split(",") if s.strip()]
    if not variants:
        raise ConfigError("no variants given")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"a variant is listed twice: {', '.join(names)}")
    return variants
