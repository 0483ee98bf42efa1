"""`funnel eval`: index the suite (cached), run the variants, print and write the report, gate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from funnel.apps.factory import build_answerers, build_pipeline
from funnel.apps.settings import Settings
from funnel.errors import ConfigError, missing_dependency
from funnel.index import location_label


def _require_eval_extra() -> None:
    for module, package in (("ir_measures", "ir-measures"), ("scipy", "scipy"), ("matplotlib", "matplotlib"),
                            ("yaml", "pyyaml")):
        try:
            __import__(module)
        except ImportError:
            raise missing_dependency("funnel eval", package, "eval") from None


@dataclass(frozen=True)
class EvalOptions:
    """What `funnel eval` is asked to do: its flags, checked by `check`."""

    dataset: Path  # a BEIR folder, or a question set (.yaml/.jsonl)
    split: str = "test"
    level: str = "auto"
    variants: str | None = None  # comma-separated specs; None: `funnel.eval.variants.DEFAULT`
    baseline: str = "hybrid"
    out: Path = Path("eval-out")
    limit: int | None = None
    corpus_sample: int | None = None
    documents: tuple[Path, ...] | None = None
    depth: int = 100
    index_given: bool = False  # an index was named: evaluate it rather than the cached one per suite
    max_hurt: int | None = None
    gate: bool = False
    strict: bool = False

    def check(self) -> None:
        if self.depth < 100:
            raise ConfigError(f"depth must be at least 100 (recall@100 is reported), got {self.depth}")
        if self.max_hurt is not None and self.max_hurt < 0:
            raise ConfigError(f"--max-hurt must be 0 or more, got {self.max_hurt}")
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"--out {self.out} is a file; name a directory")


def run_eval_command(settings: Settings, options: EvalOptions, console: Console, err_console: Console) -> list[str]:
    """Index the suite (cached), run the variants, print and write the report; the gate's failures."""
    _require_eval_extra()
    from funnel.eval import report
    from funnel.eval.suite import default_index_dir, open_suite
    from funnel.eval.variants import DEFAULT, parse_variants
    from funnel.eval.variants import answerers as variant_answerers

    options.check()
    try:
        options.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create --out {options.out}: {e.strerror or e}") from None
    variants = parse_variants(options.variants or DEFAULT)
    if options.baseline not in {v.name for v in variants}:
        raise ConfigError(f"baseline {options.baseline!r} is not among the variants: "
                          f"{', '.join(v.name for v in variants)}")
    documents = list(options.documents) if options.documents is not None else None
    suite = open_suite(options.dataset, options.split, options.level, options.limit, options.corpus_sample, documents)
    if suite.evalset.skipped:  # queries or judgments left out: said here, not only in report.md
        left_out = "; ".join(f"{n} {why}" for why, n in suite.evalset.skipped.items())
        if options.strict:
            raise ConfigError(f"{options.dataset}: --strict and the data had to be trimmed: {left_out}")
        err_console.print(f"note: evaluating {len(suite.evalset.queries)} queries; left out: {left_out} "
                          "(--strict makes this an error)", highlight=False)
    if not options.index_given:
        embedder = settings.embedder or "minilm"
        index = default_index_dir(suite, embedder, settings.section("eval").cache)
        settings = settings.model_copy(update={"index": index, "embedder": embedder})
    pipeline = build_pipeline(settings)
    answerers = build_answerers(settings, pipeline, variant_answerers(variants))  # `+answer(...)` variants
    run, ingest, calibration = _index_and_run(pipeline, suite, variants, options, err_console, answerers)
    for problem in ingest.problems:
        err_console.print(Text.assemble(("skipped", "yellow"), f" {problem}"))
    err_console.print(f"index {location_label(settings.index)}: {ingest.chunks} chunks embedded now, "
                      f"{ingest.unchanged} documents unchanged", highlight=False)
    if calibration is not None:
        err_console.print(f"calibrated the index: second stage {calibration.option} — {calibration.reason}",
                          highlight=False)
    scores = report.score(run, options.baseline)
    failures = report.gate(scores, options.max_hurt) if options.gate else []
    results = report.results_json(scores, failures)
    if any(v.is_default for v in variants):
        results["calibration"] = _calibration_json(pipeline)
        chosen = results["calibration"]
        console.print(f"default: second stage {chosen['option']} — {chosen['reason']}", highlight=False)
    _print_results(results, console, err_console)
    paths = report.write(results, options.out)
    console.print("wrote " + ", ".join(str(p) for p in paths), highlight=False)
    return failures


def _index_and_run(pipeline, suite, variants, options: EvalOptions, err_console: Console, answerers=None):
    """Build (or update) the suite's index, calibrate it when `default` needs that, and run the variants;
    under one progress bar. Returns the run, the ingest report and the calibration made (or None)."""
    from funnel.eval.runner import run_eval
    from funnel.eval.suite import build_index

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task("index", total=None)
        ingest = build_index(pipeline, suite, lambda d, t: bar.update(task, completed=d, total=t))
        if not pipeline.store.document_hashes():  # all-zero metrics would read as a result, not as a mistake
            why = "; ".join(str(p) for p in ingest.problems[:3]) or "the corpus or the documents are empty"
            raise ConfigError(f"{options.dataset}: the index holds no documents, so there is nothing to evaluate "
                              f"({why})")
        calibration = None
        if any(v.is_default for v in variants) and pipeline.reranker is not None and pipeline.calibration_problem():
            # `default` is what `funnel search` does on this index, and `funnel ingest` calibrates.
            bar.update(task, description="calibrate", completed=0, total=None)
            calibration = pipeline.calibrate(progress=lambda d, t: bar.update(task, completed=d, total=t))
        bar.update(task, description="queries", completed=0, total=len(suite.evalset.queries))
        run = run_eval(pipeline, suite.evalset, variants, options.depth, pipeline.generator,
                       lambda d, t: bar.update(task, completed=d, total=t), answerers)
    return run, ingest, calibration


def _print_results(results: dict, console: Console, err_console: Console) -> None:
    _print_table(results, console)
    for name, entry in results["variants"].items():
        if entry.get("answer_fallbacks"):
            reasons = "; ".join(f"{why} ({n})" for why, n in entry["answer_fallback_reasons"].items())
            err_console.print(Text.assemble(("warning:", "yellow"), f" {name}: the LLM failed on "
                              f"{entry['answer_fallbacks']} answers and the extractive answer stood in: {reasons}"))


def _print_table(results: dict, console: Console) -> None:
    from funnel.eval.report import metric_columns

    columns = metric_columns(results)
    table = Table(title=f"{results['dataset']} {results['split']} ({results['level']} level, "
                        f"{results['queries']} queries)", title_justify="left")
    table.add_column("variant")
    for column in columns:
        table.add_column(column, justify="right")
    table.add_column(f"vs {results['baseline']}", justify="right")
    for name, entry in results["variants"].items():
        if "skipped" in entry:
            table.add_row(name, *["–"] * len(columns), f"skipped: {entry['skipped']}")
            continue
        c = results["comparisons"].get(name)
        versus = f"{c['delta']:+.4f} p={c['p_randomization']:.3f} +{len(c['helped'])}/−{len(c['hurt'])}" if c else ""
        table.add_row(name, *[f"{entry[col]:.4f}" if col in entry else "–" for col in columns], versus)
    console.print(table)
    latency = ", ".join(f"{s} p50 {v['p50']:.1f} / p95 {v['p95']:.1f} ms" for s, v in results["latency_ms"].items())
    console.print(f"latency per query: {latency}", highlight=False)


def _calibration_json(pipeline) -> dict:
    """What the `default` variant ran under: the index's calibration, or why there was none."""
    problem = pipeline.calibration_problem() if pipeline.reranker is not None else "no reranker configured"
    if problem is not None:
        return {"option": "first_stage", "reason": problem}
    calibration = pipeline.calibration()
    return {"option": calibration.option, **calibration.to_json()}
