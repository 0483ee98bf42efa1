"""The sentence picker with its best candidate sentences re-scored by the built-in cross-encoder, against the
picker as it is, on one question set (issue 39: "score the candidate sentences with the cross-encoder").

    python bench/picker_cross_encoder.py bench/data/realpdf/questions.yaml INDEX [--weights 0.5,1,3] [--top 30]

INDEX is an index of the set's documents (`funnel eval --dataset QUESTIONS` leaves one under
~/.cache/funnel/eval/). For each answerable question: the same search, then each picker; an answer passes when
it holds every `answer_contains` string and did not abstain. The re-scored picker keeps the picker's own score
(min-max scaled over its top `--top` sentences) and adds `weight` × the cross-encoder's probability.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from funnel.engine_config import EngineConfig
from funnel.eval.questions import load_questions
from funnel.generate.context import with_continuations
from funnel.generate.extractive import ExtractiveGenerator
from funnel.pipeline import Pipeline
from funnel.rerank.onnx_cross_encoder import OnnxCrossEncoder
from funnel.types import Candidate


class CrossEncodedPicker(ExtractiveGenerator):
    """The picker, its top sentences re-scored by a cross-encoder before it chooses."""

    def __init__(self, embedder, cross_encoder: OnnxCrossEncoder, weight: float, top: int):
        super().__init__(embedder)
        self.cross_encoder, self.weight, self.top = cross_encoder, weight, top
        self._question = ""

    def pick(self, question, result):
        self._question = question
        return super().pick(question, result)

    def _choose(self, scores, pool, chosen, parts=1):
        order = np.argsort(-scores)[: self.top]
        candidates = [Candidate(chunk=replace(pool[i][1], text=pool[i][0]), fused_rank=r + 1, fused_score=1.0)
                      for r, i in enumerate(order)]
        probability = np.array(self.cross_encoder.rerank(self._question, candidates).scores)
        base = scores[order]
        rescored = np.full(len(scores), -1e9)
        rescored[order] = (base - base.min()) / ((base.max() - base.min()) or 1.0) + self.weight * probability
        return super()._choose(rescored, pool, chosen, parts=parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", type=Path)
    parser.add_argument("index")
    parser.add_argument("--weights", default="0.5,1,3")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    suite = load_questions(args.questions)
    pipeline = Pipeline.build(EngineConfig(index=args.index))
    cross_encoder = OnnxCrossEncoder.builtin()
    pickers = {"picker": ExtractiveGenerator(pipeline.embedder)}
    for weight in (float(w) for w in args.weights.split(",")):
        pickers[f"cross-encoded w={weight:g}"] = CrossEncodedPicker(pipeline.embedder, cross_encoder, weight, args.top)
    evalset = suite.evalset
    ids = [q for q in evalset.queries if q not in evalset.abstain and evalset.answers.get(q)]
    passed = dict.fromkeys(pickers, 0)
    seconds = dict.fromkeys(pickers, 0.0)
    for qid in ids:
        question = evalset.queries[qid]
        result = with_continuations(pipeline.search(question), pipeline.store)
        marks = []
        for name, picker in pickers.items():
            started = time.perf_counter()
            answer = pipeline.prepare(result, picker).answer()
            seconds[name] += time.perf_counter() - started
            ok = not answer.abstained and all(s.lower() in answer.text.lower() for s in evalset.answers[qid])
            passed[name] += ok
            marks.append("P" if ok else "-")
        print(f"{qid[:44]:46}{' '.join(marks)}", flush=True)
    for name in pickers:
        print(f"{name:24}{passed[name]}/{len(ids)} passed, {seconds[name] / len(ids):.2f} s an answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
