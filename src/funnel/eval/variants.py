"""Pipeline variants evaluated side by side: `{bm25|dense|hybrid}[+rerank(POLICY[:WEIGHT][|gate:GATE])]`, and
`default`: exactly what `funnel search` returns with the settings and the index's calibration in force.

Any of them may end in `+answer(ANSWERER)`: the same ranking, answered by another answerer than the
configured one (`extractive`, or an LLM backend spec as `[llm] backend` takes it: `local`, `ollama:MODEL`,
`openai:MODEL`), so answerers are compared side by side on the same retrieval (issue 39)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from funnel.errors import ConfigError
from funnel.rerank.policies import PolicyChoice, RerankPolicy
from funnel.retrieve.first_stage import Retrieval

DEFAULT = (
    "bm25,dense,hybrid,hybrid+rerank(replace),hybrid+rerank(guaranteed_slots),hybrid+rerank(rrf),default"
)
DEFAULT_VARIANT = "default"
_SPEC = re.compile(r"^(?P<base>[a-z0-9]+)(?:\+rerank\((?P<policy>[^()]*)\))?$")  # POLICY: PolicyChoice.parse
_ANSWER = re.compile(r"^(?P<rest>.+?)\+answer\((?P<answerer>[^()]+)\)$")


@dataclass(frozen=True)
class Variant:
    name: str
    retrieval: Retrieval
    policy: RerankPolicy  # NONE: first stage only
    weight: float = 1.0  # the reranker's weight under rrf
    gate: float | None = None  # under rrf: the lead the reranker's best score needs (None: the setting's)
    answerer: str | None = None  # `+answer(...)`: who answers (None: the configured answer generator)

    @property
    def reranks(self) -> bool:
        return self.policy is not RerankPolicy.NONE and not self.is_default

    @property
    def is_default(self) -> bool:
        """`default` runs `Pipeline.search` itself: policy and weights come from the settings and calibration."""
        return self.name.partition("+answer(")[0] == DEFAULT_VARIANT

    @classmethod
    def parse(cls, spec: str) -> Variant:
        spec = spec.strip()
        answered = _ANSWER.match(spec)
        if answered:
            base = cls.parse(answered["rest"])
            return replace(base, name=spec, answerer=answered["answerer"].strip())
        if spec == DEFAULT_VARIANT:
            return cls(spec, Retrieval.HYBRID, RerankPolicy.NONE)
        match = _SPEC.match(spec)
        if not match:
            raise ConfigError(
                f"bad variant {spec!r}; expected bm25, dense or hybrid, optionally +rerank(POLICY), "
                "e.g. hybrid+rerank(guaranteed_slots), hybrid+rerank(rrf:0.5) or hybrid+rerank(rrf:1|gate:0.2), "
                "or default; any of them optionally +answer(ANSWERER), e.g. default+answer(local)"
            )
        retrieval = Retrieval.parse(match["base"])
        if retrieval is Retrieval.AUTO:
            raise ConfigError(f"bad variant {spec!r}: the calibrated first stage is the `default` variant")
        try:
            choice = PolicyChoice.parse(match["policy"]) if match["policy"] else PolicyChoice(RerankPolicy.NONE)
        except ConfigError as e:
            raise ConfigError(f"bad variant {spec!r}: {e}") from None
        if choice.kind is RerankPolicy.AUTO:
            raise ConfigError(f"bad variant {spec!r}: the calibrated policy is the `default` variant")
        weight = 1.0 if choice.weight is None else choice.weight
        return cls(spec, retrieval, choice.kind, weight, choice.gate)


def parse_variants(specs: str) -> list[Variant]:
    variants = [Variant.parse(s) for s in specs.split(",") if s.strip()]
    if not variants:
        raise ConfigError("no variants given")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"a variant is listed twice: {', '.join(names)}")
    return variants


def answerers(variants: list[Variant]) -> list[str]:
    """The answerers the variants name with `+answer(...)`, each once, in order."""
    return list(dict.fromkeys(v.answerer for v in variants if v.answerer))
