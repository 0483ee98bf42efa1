"""A question set a user writes for their own documents (YAML or JSONL).

    documents: ../docs                    # folder(s) to ingest, relative to this file (optional)
    questions:
      - id: ceo                           # optional; defaults to q1, q2, ...
        question: Who is the CEO of Zentara Robotics?
        sources: [portfolio_companies.pdf]  # expected documents, matched as path suffixes
        answer_contains: [Iris Kallas]      # strings the answer must contain
      - question: Who leads Project Heron?
        expect: abstain                     # no document answers it: the right outcome is an abstention
        page: 3                             # optional, PDFs: the page(s) holding the answer (1-based,
                                            # physical), an int or a list; scored as page_hit@k

JSONL: one question object per line; documents then come from `--documents`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from funnel.errors import ConfigError
from funnel.eval.beir import EvalSet, json_line


@dataclass(frozen=True)
class QuestionSet:
    evalset: EvalSet
    documents: tuple[Path, ...]


def _read(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the question set ({e})") from None
    if path.suffix == ".jsonl":
        questions = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                questions.append(json_line(line, path, number))
        return {"questions": questions}
    import yaml

    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    except (yaml.YAMLError, ValueError) as e:  # ValueError: a date such as 2024-13-45
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if isinstance(data, list):
        data = {"questions": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'questions' list")
    return data


def _strings(value, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ConfigError(f"{where}: expected a string or a list of strings")


def _pages(item: dict, sources: list[str], where: str) -> dict[str, int]:
    """The judged page units ("file.pdf#p23") of a question with a `page` (or `pages`) field."""
    value = item.get("page", item.get("pages"))
    if value is None:
        return {}
    numbers = value if isinstance(value, list) else [value]
    if not numbers or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in numbers):
        raise ConfigError(f"{where}: 'page' must be a page number (1 or more) or a list of them")
    if len(sources) != 1:
        raise ConfigError(f"{where}: 'page' needs exactly one entry in 'sources' (the file the page is in)")
    return {page_unit(str(PurePosixPath(sources[0])), n): 1 for n in numbers}


def page_unit(source: str, page: int) -> str:
    return f"{source}#p{page}"


def load_questions(path: Path, documents: list[Path] | None = None) -> QuestionSet:
    data = _read(path)
    raw = data.get("questions")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{path}: the question set is empty")
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    answers: dict[str, list[str]] = {}
    pages: dict[str, dict[str, int]] = {}
    abstain: set[str] = set()
    skipped = 0
    for number, item in enumerate(raw, start=1):
        where = f"{path}: question {number}"
        if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
            raise ConfigError(f"{where}: needs a non-empty 'question'")
        qid = str(item.get("id", f"q{number}"))
        if qid in queries:
            raise ConfigError(f"{where}: duplicate id {qid!r}")
        sources = _strings(item.get("sources"), where + " sources")
        expected = _strings(item.get("answer_contains"), where + " answer_contains")
        if (expect := item.get("expect")) is not None:
            if expect != "abstain":
                raise ConfigError(f"{where}: 'expect' may only be 'abstain', got {expect!r:.40}")
            if sources or expected:
                raise ConfigError(f"{where}: 'expect: abstain' takes no 'sources' or 'answer_contains'")
            queries[qid] = item["question"].strip()
            qrels[qid] = {}
            abstain.add(qid)
            continue
        if not sources and not expected:
            skipped += 1
            continue
        queries[qid] = item["question"].strip()
        qrels[qid] = {str(PurePosixPath(s)): 1 for s in sources}
        answers[qid] = expected
        if (page_units := _pages(item, sources, where)):
            pages[qid] = page_units
    if not queries:
        raise ConfigError(f"{path}: no question has 'sources', 'answer_contains' or 'expect' to check")

    if documents:
        folders = tuple(documents)
    else:
        named = data.get("documents")
        named = [named] if isinstance(named, str) else (named or [])
        folders = tuple(_folder(path, d) for d in _strings(named, f"{path}: documents"))
    if not folders:
        raise ConfigError(f"{path}: no documents to search; add 'documents:' or pass --documents")
    evalset = EvalSet(
        name=path.stem,
        split="all",
        level="document",
        queries=queries,
        qrels=qrels,
        skipped={"questions without sources or answer_contains": skipped} if skipped else {},
        answers=answers,
        by_path=True,
        pages=pages,
        abstain=frozenset(abstain),
    )
    return QuestionSet(evalset, folders)


def _folder(path: Path, named: str) -> Path:
    try:
        return (path.parent / named).resolve()
    except (OSError, ValueError) as e:  # ValueError: an embedded NUL
        raise ConfigError(f"{path}: documents: {named!r:.100} is not a usable path ({e})") from None


def source_key(doc_path: str, expected: list[str]) -> str:
    """The expected source a document path matches (suffix on a path boundary), else the path itself."""
    posix = PurePosixPath(doc_path).as_posix()
    for source in expected:
        if posix == source or posix.endswith("/" + source):
            return source
    return posix
