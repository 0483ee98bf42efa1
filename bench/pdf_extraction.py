"""How well does each way of reading a PDF's text keep its words? (issue 16, part 2)

For every page of every PDF given, each method's text is compared with a reference extraction by
poppler's `pdftotext` (Debian package poppler-utils: `apt-get install poppler-utils`), an extractor
independent of pdfminer/pdfplumber. Score: bag-of-words F1 of lower-cased alphanumeric words per page,
averaged over pages; and the share of pages where the method glues words (a word of 15+ letters that the
reference does not have, made of two or more of the reference's words on that page).

    python bench/pdf_extraction.py [PDF or FOLDER ...] [--max-pages 60]

Methods: pdfplumber at x_tolerance 3 (its default, what funnel used before), 1 and 1.5; pdfplumber with
x_tolerance_ratio (tolerance relative to each character's size); pypdf; pdfium (pypdfium2).
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

_WORD = re.compile(r"[a-z0-9]+")
HERE = Path(__file__).resolve().parent


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def f1(ours: list[str], reference: list[str]) -> float:
    if not ours and not reference:
        return 1.0
    a, b = Counter(ours), Counter(reference)
    common = sum((a & b).values())
    if not common:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def glued(ours: list[str], reference: list[str]) -> bool:
    vocabulary = set(reference)
    for word in set(ours) - vocabulary:
        if len(word) >= 15 and word.isalpha() and _splits(word, vocabulary):
            return True
    return False


def _splits(word: str, vocabulary: set[str]) -> bool:
    """Whether `word` is two or more vocabulary words run together."""
    n = len(word)
    reachable = [True] + [False] * n
    for i in range(n):
        if reachable[i]:
            for j in range(i + 2, n + 1):
                if word[i:j] in vocabulary:
                    reachable[j] = True
    return reachable[n] and word not in vocabulary


def reference_pages(path: Path, n: int) -> list[str]:
    out = subprocess.run(["pdftotext", "-l", str(n), str(path), "-"], capture_output=True, text=True, timeout=300)
    return out.stdout.split("\f")[:n]


def plumber(path: Path, n: int, **options) -> list[str]:
    import pdfplumber

    pages = []
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages[:n]:
            pages.append("\n".join(line["text"] for line in page.extract_text_lines(return_chars=False, **options)))
            page.close()
    return pages


def with_pypdf(path: Path, n: int) -> list[str]:
    import pypdf

    reader = pypdf.PdfReader(path)
    return [page.extract_text() or "" for page in reader.pages[:n]]


def with_pdfium(path: Path, n: int) -> list[str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    try:
        return [document[i].get_textpage().get_text_range() for i in range(min(n, len(document)))]
    finally:
        document.close()


def funnel_loader(path: Path, n: int) -> list[str]:
    """What funnel's own PDF loader keeps, page by page (tables as rows, headers/footers dropped)."""
    from funnel.ingest.pdf import load_pdf

    loaded = load_pdf(path, "bench", path.name)
    pages = [""] * n
    for section in loaded.sections:
        if section.page is not None and section.page <= n:
            pages[section.page - 1] += "\n" + (section.heading or "") + "\n" + section.text
    return pages


METHODS = {
    "pdfplumber x_tolerance=3 (default)": lambda p, n: plumber(p, n),
    "pdfplumber x_tolerance=1.5": lambda p, n: plumber(p, n, x_tolerance=1.5),
    "pdfplumber x_tolerance=1": lambda p, n: plumber(p, n, x_tolerance=1),
    "pdfplumber x_tolerance_ratio=0.15": lambda p, n: plumber(p, n, x_tolerance_ratio=0.15),
    "pdfplumber x_tolerance_ratio=0.25": lambda p, n: plumber(p, n, x_tolerance_ratio=0.25),
    "pypdf": with_pypdf,
    "pdfium (pypdfium2)": with_pdfium,
    "funnel loader": funnel_loader,
}


def pdfs(arguments: list[str]) -> list[Path]:
    found: list[Path] = []
    for argument in arguments or [str(HERE / "data" / "realpdf" / "pdfs")]:
        path = Path(argument)
        found += sorted(path.rglob("*.pdf")) if path.is_dir() else [path]
    return [p for p in found if p.stat().st_size > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="PDFs or folders (default: bench/data/realpdf/pdfs)")
    parser.add_argument("--max-pages", type=int, default=60, help="pages read per PDF")
    parser.add_argument("--methods", help="comma-separated subset of the method names (substring match)")
    args = parser.parse_args()
    if shutil.which("pdftotext") is None:
        print("pdftotext is missing: apt-get install poppler-utils (the reference extractor)", file=sys.stderr)
        return 2
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    methods = METHODS
    if args.methods:
        wanted = args.methods.split(",")
        methods = {name: m for name, m in METHODS.items() if any(w in name for w in wanted)}
    files = pdfs(args.paths)
    scores: dict[str, list[float]] = {name: [] for name in methods}
    glue: dict[str, list[bool]] = {name: [] for name in methods}
    seconds: Counter[str] = Counter()
    n_pages = 0
    for path in files:
        reference = reference_pages(path, args.max_pages)
        reference_words = [words(t) for t in reference]
        n_pages += len(reference)
        for name, method in methods.items():
            t0 = time.perf_counter()
            try:
                pages = method(path, len(reference))
            except Exception as e:  # a method that cannot read a file scores 0 on it
                print(f"  {name} failed on {path.name}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
                pages = [""] * len(reference)
            seconds[name] += time.perf_counter() - t0
            for ours, ref in zip(pages + [""] * (len(reference) - len(pages)), reference_words):
                if not ref:
                    continue
                w = words(ours)
                scores[name].append(f1(w, ref))
                glue[name].append(glued(w, ref))
    print(f"{len(files)} PDFs, {n_pages} pages (at most {args.max_pages} per PDF); reference: pdftotext")
    print(f"{'method':40} {'mean F1':>8} {'pages F1<0.9':>13} {'pages glued':>12} {'seconds':>8}")
    for name in methods:
        s = scores[name]
        low = sum(1 for v in s if v < 0.9)
        print(f"{name:40} {statistics.mean(s):8.4f} {low:13d} {sum(glue[name]):12d} {seconds[name]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
