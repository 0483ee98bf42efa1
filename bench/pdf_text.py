"""How often does the PDF loader repair pdfplumber's text? (issue 42, item 4)

Counts, per page of each PDF, what `funnel.ingest.pdf_text` changes as the loader reads it: superscript
footnote marks set apart from their words ("later11" -> "later 11"), identifiers rejoined across a line
break after an underscore ("ASN1_" + "SYNTAX_ERROR"), words rejoined across a hyphenated line break (as
before the issue). The loader runs as it does at ingest; the counts come from wrapping its two repair
calls, so they are what the index gets.

    python bench/pdf_text.py [PDF or FOLDER ...] [--pages]     (default: bench/data/realpdf/pdfs)
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from funnel.ingest import pdf, pdf_text

HERE = Path(__file__).resolve().parent
KINDS = ("marks", "identifiers", "hyphens")


def repairs(path: Path) -> dict[int, Counter[str]]:
    """{page: Counter(kind -> repairs)} of one PDF as the loader reads it, every page."""
    per_page: dict[int, Counter[str]] = {}
    state = {"read": 1, "blocks": 0, "pages": 0}
    line_text, join_lines, text_blocks = pdf.line_text, pdf.join_lines, pdf._text_blocks

    def counted_line_text(text, chars):
        n = len(pdf_text.footnote_marks(text, chars))
        per_page.setdefault(state["read"], Counter())["marks"] += n
        return line_text(text, chars)

    def counted_join_lines(lines):
        counts = per_page.setdefault(state["blocks"], Counter())
        out = lines[0]
        for line in lines[1:]:
            if pdf_text.hyphenated(out, line):
                counts["hyphens"] += 1
            elif pdf_text.identifier_broken(out, line):
                counts["identifiers"] += 1
            out = line  # what the next test looks at: the end of the text so far is this line's end
        return join_lines(lines)

    def counted_text_blocks(lines, body_size):
        state["blocks"] += 1  # called once a page, in order, after every page was read
        return text_blocks(lines, body_size)

    def on_page(_display, read, total):
        state["read"], state["pages"] = read + 1, total

    counted = counted_line_text, counted_join_lines, counted_text_blocks
    pdf.line_text, pdf.join_lines, pdf._text_blocks = counted
    try:
        pdf.load_pdf(path, path.name, path.name, pages=on_page)
    finally:
        pdf.line_text, pdf.join_lines, pdf._text_blocks = line_text, join_lines, text_blocks
    return {page: per_page.get(page, Counter()) for page in range(1, state["pages"] + 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[HERE / "data" / "realpdf" / "pdfs"])
    parser.add_argument("--pages", action="store_true", help="also list every page with a repair")
    args = parser.parse_args()
    files = sorted(p for path in args.paths for p in ([path] if path.is_file() else path.glob("*.pdf")))
    if not files:
        sys.exit("no PDF given")
    total: Counter[str] = Counter()
    n_pages = 0
    print(f"{'PDF':32} {'pages':>5} {'repaired':>8} " + " ".join(f"{k:>11}" for k in KINDS))
    listed = []
    for path in files:
        per_page = repairs(path)
        counts = sum(per_page.values(), Counter())
        pages = len(per_page)
        n_pages += pages
        total += counts
        repaired = sum(1 for c in per_page.values() if sum(c.values()))
        print(f"{path.name:32} {pages:5} {repaired:8} " + " ".join(f"{counts[k]:11}" for k in KINDS))
        listed += [(path.name, page, c) for page, c in per_page.items() if sum(c.values())]
    print(f"{'all':32} {n_pages:5} {len(listed):8} " + " ".join(f"{total[k]:11}" for k in KINDS))
    if args.pages:
        print("\npage by page (repairs on that page):")
        for name, page, c in listed:
            print(f"  {name} p{page}: " + ", ".join(f"{k} {c[k]}" for k in KINDS if c[k]))


if __name__ == "__main__":
    main()
