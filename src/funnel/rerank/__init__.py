"""Second stage: rerankers, the policies that combine them with the first stage, and the fallback."""

from funnel.rerank.base import Reranker
from funnel.rerank.policies import RerankPolicy, second_stage

__all__ = ["Reranker", "RerankPolicy", "second_stage"]
