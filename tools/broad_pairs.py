"""Build judged training collections from domains none of funnel's evaluation sets covers, in BEIR layout,
for `train_reranker.py --broad NAME=DIR` (issue 12: "much broader training pairs, mined from the structure of
text you can get here").

    python tools/broad_pairs.py debian --translations Translation-en.xz --out ~/.cache/funnel/broad/debian
    python tools/broad_pairs.py squad --json xquad.en.json --json train-v1.1.json --out ~/.cache/funnel/broad/squad
    python tools/broad_pairs.py stackexchange --posts coffee/Posts.xml --posts beer/Posts.xml \
        --out ~/.cache/funnel/broad/stackexchange

Sources (both public, both reachable from a machine that reaches only package registries and GitHub):
- debian: Debian's package descriptions (`dists/bookworm/main/i18n/Translation-en.xz` from the Debian
  archive): the one-line synopsis is the query, the long description the document. Software of every
  field: games, astronomy, biology, fonts, libraries. Packages of one family share their long description;
  only the first package of each description's opening paragraph is kept, so a family never judges its own
  copies as negatives.
- squad: SQuAD-format JSON (questions written by people about Wikipedia paragraphs, e.g. XQuAD's English
  file). A file cut short (some mirrors truncate large files) is read up to its last whole paragraph.
- stackexchange: a site's `Posts.xml` from the Stack Exchange data dump (CC BY-SA; public GitHub projects
  hold the small sites', e.g. coffee and beer brewing): each question's title is the query, its accepted
  answer (else its best-scored answer with a positive score) the document; the title followed by the
  question's body (its first 80 words) is a second, long query for the same answer. One answer per question
  is kept, so a question's other answers are never mined as its negatives.

Each writes corpus.jsonl, queries.jsonl and qrels/train.tsv. train_reranker.py mines the hard negatives
with funnel's own hybrid first stage, as it does for the shared sets. None of this is a test collection
and none of it is a reserved held-out set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

SEED = "broad-pairs-1"
POST_QUERY_WORDS = 80  # stackexchange: a question's body, cut here, after its title makes its long query


def _hashed_order(key: str) -> str:
    return hashlib.sha256(f"{SEED}:{key}".encode()).hexdigest()


def debian(translations: Path, limit: int, queries: int) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    """(corpus records, {query id: (synopsis, package)}) from a Translation-en file."""
    opener = lzma.open if translations.suffix == ".xz" else open
    with opener(translations, "rt", encoding="utf-8") as fh:
        text = fh.read()
    seen: set[str] = set()
    records: list[dict] = []
    synopses: dict[str, str] = {}
    for block in text.split("\n\n"):
        package = re.search(r"^Package: (\S+)", block, re.M)
        described = re.search(r"^Description-en: (.*)\n((?: .*\n?)*)", block, re.M)
        if not package or not described:
            continue
        synopsis = described.group(1).strip()
        paragraphs = [" ".join(line[1:] for line in p.strip("\n").split("\n"))
                      for p in re.split(r"\n \.\n", described.group(2).rstrip("\n"))]
        body = "\n\n".join(p.strip() for p in paragraphs if p.strip())
        opening = " ".join(paragraphs[0].split())[:200].lower()  # re.split always gives one
        if len(body) < 120 or len(synopsis) < 12 or opening in seen:
            continue
        seen.add(opening)
        doc_id = package.group(1)
        records.append({"_id": doc_id, "title": "", "text": body})
        synopses[doc_id] = synopsis
    records.sort(key=lambda r: _hashed_order(r["_id"]))
    records = records[:limit]
    chosen = sorted(records[:queries], key=lambda r: r["_id"])
    return records, {f"q-{r['_id']}": (synopses[r["_id"]], r["_id"]) for r in chosen}


_PARAGRAPH = re.compile(r'\{\s*"context"\s*:')
_TITLE = re.compile(r'"title"\s*:\s*"((?:[^"\\]|\\.)*)"')


def squad(files: list[Path], queries: int) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    """(corpus records, {query id: (question, paragraph id)}) from SQuAD-format files, each read up to its
    last whole paragraph."""
    decoder = json.JSONDecoder()
    records: list[dict] = []
    asked: dict[str, tuple[str, str]] = {}
    for number, path in enumerate(files):
        text = path.read_text(encoding="utf-8", errors="replace")
        titles = [(m.start(), json.loads(f'"{m.group(1)}"')) for m in _TITLE.finditer(text)]
        for index, match in enumerate(_PARAGRAPH.finditer(text)):
            try:
                paragraph, _ = decoder.raw_decode(text, match.start())
            except json.JSONDecodeError:
                break  # the file is cut here
            title = next((t for at, t in reversed(titles) if at < match.start()), "")
            doc_id = f"{number}-{index}"
            records.append({"_id": doc_id, "title": title.replace("_", " "), "text": paragraph["context"]})
            for qa in paragraph.get("qas", []):
                question = " ".join(str(qa.get("question", "")).split())
                if len(question) >= 12 and not qa.get("is_impossible"):
                    asked[f"q-{doc_id}-{len(asked)}"] = (question, doc_id)
    chosen = sorted(asked, key=_hashed_order)[:queries]
    return records, {qid: asked[qid] for qid in sorted(chosen)}


class _Text(HTMLParser):
    """A post's HTML body as plain text: paragraphs, list items and code blocks on lines of their own."""

    BLOCKS = {"p", "li", "pre", "blockquote", "h1", "h2", "h3", "h4", "br", "tr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).split("\n"))
        return "\n".join(line for line in lines if line)


def _post_text(body: str) -> str:
    parser = _Text()
    parser.feed(body)
    parser.close()
    return parser.text()


def stackexchange(files: list[Path], queries: int) -> tuple[list[dict], dict[str, tuple[str, str]]]:
    """(corpus records, {query id: (title, answer id)}) from Stack Exchange `Posts.xml` files: one answer per
    question, the accepted one or else the best-scored one with a positive score."""
    records: list[dict] = []
    asked: dict[str, tuple[str, str]] = {}
    for number, path in enumerate(files):
        rows = [row.attrib for row in ET.parse(path).getroot().iter("row")]
        answers: dict[str, list[dict]] = {}
        for row in rows:
            if row.get("PostTypeId") == "2" and row.get("ParentId"):  # an answer
                answers.setdefault(row["ParentId"], []).append(row)
        for question in rows:
            if question.get("PostTypeId") != "1" or not question.get("Title"):
                continue
            given = answers.get(question["Id"], [])
            accepted = [a for a in given if a["Id"] == question.get("AcceptedAnswerId")]
            scored = sorted((a for a in given if int(a.get("Score") or 0) > 0),
                            key=lambda a: -int(a["Score"]))
            best = (accepted or scored or [None])[0]
            title = " ".join(question["Title"].split())
            text = _post_text(best.get("Body", "")) if best else ""
            if len(title) < 12 or len(text) < 80:
                continue
            doc_id = f"{number}-{best['Id']}"
            records.append({"_id": doc_id, "title": "", "text": text})
            asked[f"q-{doc_id}"] = (title, doc_id)
            # The question as asked, too: a need described in a few sentences, not a title's few words.
            words = _post_text(question.get("Body", "")).split()
            if len(words) >= 12:
                post = " ".join(words[:POST_QUERY_WORDS])
                asked[f"q-{doc_id}-post"] = (f"{title} {post}", doc_id)
    chosen = sorted(asked, key=_hashed_order)[:queries]
    return records, {qid: asked[qid] for qid in sorted(chosen)}


def write(out: Path, records: list[dict], queries: dict[str, tuple[str, str]]) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"_id": qid, "text": q}) + "\n" for qid, (q, _) in queries.items())
    with open(out / "qrels" / "train.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        fh.writelines(f"{qid}\t{doc}\t1\n" for qid, (_, doc) in queries.items())
    print(f"{out}: {len(records)} documents, {len(queries)} judged queries")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", choices=["debian", "squad", "stackexchange"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--translations", type=Path, help="debian: a Translation-en(.xz) file")
    parser.add_argument("--json", type=Path, action="append", default=[], help="squad: a SQuAD-format file")
    parser.add_argument("--posts", type=Path, action="append", default=[],
                        help="stackexchange: a site's Posts.xml")
    parser.add_argument("--documents", type=int, default=12000, help="debian: documents kept")
    parser.add_argument("--queries", type=int, default=2500)
    args = parser.parse_args(argv)
    if args.source == "debian":
        if not args.translations:
            parser.error("debian needs --translations")
        records, queries = debian(args.translations, args.documents, args.queries)
    elif args.source == "squad":
        if not args.json:
            parser.error("squad needs --json")
        records, queries = squad(args.json, args.queries)
    else:
        if not args.posts:
            parser.error("stackexchange needs --posts")
        records, queries = stackexchange(args.posts, args.queries)
    write(args.out, records, queries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
