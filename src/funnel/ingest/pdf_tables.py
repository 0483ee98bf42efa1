"""Tables without ruled lines on a PDF page, found by their columns' alignment (for `funnel.ingest.pdf`).

pdfplumber's text strategy ("vertical_strategy": "text") finds such tables, but run over a whole page it
also makes tables of prose: every left-aligned line lines up, and its cuts run through words ("s reimbur").
So the page is first searched for candidate blocks: runs of at least _MIN_ROWS consecutive lines that each
fall into two or more pieces separated by a gap wider than a column gap (_GAP_EMS of the font size), a
header line included. pdfplumber's text strategy then reads only that block, and the result is kept only
when it looks like a table, else the block stays prose:
- at least _MIN_ROWS rows (a header and two data rows) and two columns, most rows filling two cells or more;
- no word cut between two cells, no dot leaders (a table of contents), short cells (two columns of prose
  give cells of whole lines), not set all in a monospaced font (a code listing aligned with spaces);
- a header row that is set apart from the rows under it: in another font (bold), over a ruled line, or of
  another type (words over a column of numbers). A reference card's "command  description" lines have none
  of these and stay prose.
"""

from __future__ import annotations

import re
from typing import Any

_MIN_ROWS = 3
# A gap between two characters of a line wider than this many font sizes separates two cells.
_GAP_EMS = 1.0
# Lines further apart than this many line heights do not belong to one table.
_ROW_GAP_LINES = 2.5
# A ruled box with this share of its area inside a table found without rules is a part of that table.
_WITHIN_SHARE = 0.7
# Rows of one table are set in one size, to within this ratio.
_SAME_SIZE_RATIO = 1.15
# Two columns of prose give cells of whole lines; table cells are mostly short.
_MAX_MEDIAN_WORDS = 5
_LONG_CELL_WORDS = 9
_MAX_LONG_SHARE = 0.25
_TEXT_SETTINGS = {
    "vertical_strategy": "text",
    "horizontal_strategy": "text",
    "text_x_tolerance_ratio": 0.15,
}
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}|(?:·\s?){3,}|…{2,}")
_NUMBER = re.compile(r"^[-+−]?[$€£¥]?\d[\d.,:/%]*\s*[%a-zA-Z]{0,3}$")
_PAGE_LIST = re.compile(r"[^\W\d].*,\s*\d+(?:[–-]\d+)?(?:,\s*\d+(?:[–-]\d+)?)*,?$")
_MONO = re.compile(r"mono|courier|typewriter|code|consol|\btt|cmtt|lmtt", re.IGNORECASE)


def with_borderless_tables(page: Any, ruled: list[tuple[tuple, list]]) -> list[tuple[tuple, list]]:
    """The page's (bbox, rows) of ruled tables and of tables without rules. A ruled "table" inside a table
    found without rules is a part of it that has a few rules (columns between two vertical lines), read
    without its header: the whole table replaces it."""
    borderless = borderless_tables(page, [bbox for bbox, _ in ruled])
    kept = [(bbox, rows) for bbox, rows in ruled if not any(_within(bbox, outer) for outer, _ in borderless)]
    return kept + borderless


def _within(inner: tuple, outer: tuple) -> bool:
    """Whether most of box `inner` lies in box `outer` (a ruled box reaches past the text to its rules)."""
    width = min(inner[2], outer[2]) - max(inner[0], outer[0])
    height = min(inner[3], outer[3]) - max(inner[1], outer[1])
    area = (inner[2] - inner[0]) * (inner[3] - inner[1])
    return width > 0 and height > 0 and width * height >= _WITHIN_SHARE * area


def borderless_tables(page: Any, ruled: list[tuple[float, float, float, float]]) -> list[tuple[tuple, list]]:
    """(bbox, rows) of each table without rules on `page`, outside the boxes of its ruled tables."""
    found = []
    for top, bottom in _candidate_blocks(page, ruled):
        x0, x1 = float(page.bbox[0]), float(page.bbox[2])
        region = page.crop((x0, top - 1, x1, bottom + 1), strict=False)
        if _monospaced([c for c in region.chars if c.get("text", "").strip()]):
            continue  # a code listing aligned with spaces; the cheap test first, the text strategy is not
        try:
            tables = region.find_tables(table_settings=_TEXT_SETTINGS)
        except Exception:  # noqa: BLE001, S112 (the text strategy failed on odd geometry: it stays prose)
            continue
        # The text strategy may cut one block into several tables; its columns are taken from the largest
        # and the whole block is read again between them.
        largest = max(tables, key=lambda t: len(t.cells), default=None)
        table = _widened(region, largest) if largest is not None else None
        rows = _cleaned(table.extract(x_tolerance_ratio=0.15)) if table is not None else []
        if rows and _looks_like_table(region, table, rows):
            found.append((table.bbox, rows))
    return found


def _widened(region: Any, table: Any) -> Any:
    """The table read again between the columns the text strategy found, widened to the block's text: a
    header wider than its column ("Hotel cap (EUR)" over "150") is not left outside, and a column of too
    few words for the text strategy ("Debian", "Ubuntu" beside "i386/amd64") is a column of its own."""
    words = region.extract_words(x_tolerance_ratio=0.15)
    edges = sorted({round(float(cell[0]), 1) for cell in table.cells} | {round(float(table.bbox[2]), 1)})
    if not words or len(edges) < 2:
        return None
    pieces = _word_pieces(words)
    first = min(float(w["x0"]) for w in words) - 1
    last = max(float(w["x1"]) for w in words) + 1
    beyond = [left for left, _ in pieces if left >= edges[-1]]
    edges = ([first] if any(right <= edges[0] for _, right in pieces) else []) + edges
    edges[0] = min(edges[0], first)
    edges = edges + ([min(beyond) - 0.5, last] if beyond else [])
    edges[-1] = max(edges[-1], last)
    # A column of right-aligned numbers starts where most of them do, inside a wider header ("Price ($)"
    # over "13.65"): such a cut moves left of the word it would split.
    spans = [(float(w["x0"]), float(w["x1"])) for w in words]
    for i in range(1, len(edges) - 1):
        for _ in range(len(spans)):
            crossed = [left for left, right in spans if left < edges[i] < right]
            if not crossed:
                break
            edges[i] = min(crossed) - 0.5
    # A cut between two words of one piece (no column gap between them) is not a column: rows that all
    # start "Local game binaries", "Local libraries" line up their second words by chance.
    inner = [x for x in edges[1:-1] if not any(left < x < right for left, right in pieces)]
    edges = sorted({edges[0], *inner, edges[-1]})
    if len(edges) < 3:
        return None
    settings = {**_TEXT_SETTINGS, "vertical_strategy": "explicit", "explicit_vertical_lines": edges}
    try:
        again = region.find_tables(table_settings=settings)
    except Exception:  # noqa: BLE001 (as above: no table, the block stays prose)
        return None
    return max(again, key=lambda t: len(t.cells), default=None)


def _word_pieces(words: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The x-spans of runs of words on one line with no column gap between them."""
    return [piece for line in _pieces_per_line(words) for piece in line]


def _pieces_per_line(words: list[dict[str, Any]]) -> list[list[tuple[float, float]]]:
    lines = []
    for line in _by_line(words):
        pieces: list[tuple[float, float]] = []
        for w in line:
            size = float(w["bottom"]) - float(w["top"])
            if pieces and float(w["x0"]) - pieces[-1][1] <= _GAP_EMS * size:
                pieces[-1] = (pieces[-1][0], max(pieces[-1][1], float(w["x1"])))
            else:
                pieces.append((float(w["x0"]), float(w["x1"])))
        lines.append(pieces)
    return lines


def _lines(page: Any, ruled: list) -> list[tuple[float, float, float, list[tuple[float, float]]]]:
    """(top, bottom, font size, x-spans of its pieces) per text line outside ruled tables, top to bottom."""
    kept = []
    for ch in page.chars:
        if not ch.get("text", "").strip():
            continue
        cx, cy = (ch["x0"] + ch["x1"]) / 2, (ch["top"] + ch["bottom"]) / 2
        if any(x0 <= cx <= x1 and top <= cy <= bottom for x0, top, x1, bottom in ruled):
            continue
        kept.append(ch)
    lines = []
    for chars in _by_line(kept):
        size = max(1.0, sum(float(c.get("size", 0.0)) for c in chars) / len(chars))
        pieces: list[tuple[float, float]] = []
        for ch in chars:
            left, right = float(ch["x0"]), float(ch["x1"])
            if pieces and left - pieces[-1][1] <= _GAP_EMS * size:
                pieces[-1] = (pieces[-1][0], max(pieces[-1][1], right))
            else:
                pieces.append((left, right))
        top = min(float(c["top"]) for c in chars)
        bottom = max(float(c["bottom"]) for c in chars)
        lines.append((top, bottom, size, pieces))
    return lines


def _by_line(objs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Characters or words grouped into lines, top to bottom, each left to right: tops within 0.4 of the
    line's height are one line (a Courier name and a Times description sit a point apart)."""
    lines: list[list[dict[str, Any]]] = []
    top = height = 0.0
    for obj in sorted(objs, key=lambda o: float(o["top"])):
        if lines and float(obj["top"]) - top <= 0.4 * height:
            lines[-1].append(obj)
        else:
            lines.append([obj])
            top, height = float(obj["top"]), max(1.0, float(obj["bottom"]) - float(obj["top"]))
    return [sorted(line, key=lambda o: float(o["x0"])) for line in lines]


def _candidate_blocks(page: Any, ruled: list) -> list[tuple[float, float]]:
    """(top, bottom) of each run of at least _MIN_ROWS close lines that each fall into two pieces or more;
    an indented line of one piece (a cell's text wrapped onto a second line) may sit between them."""
    blocks: list[tuple[float, float]] = []
    run: list[tuple[float, float]] = []
    rows = 0
    left = previous_bottom = 0.0

    def close_run() -> None:
        while run and run[-1][2] == 1:  # a run ends on a row of two pieces
            run.pop()
        if rows >= _MIN_ROWS:
            blocks.append((run[0][0], run[-1][1]))

    previous_size = 0.0
    for top, bottom, size, pieces in _lines(page, ruled):
        # A heading ("A.2   Commands", set larger) is not a row of the table under it.
        same_size = max(size, previous_size) <= _SAME_SIZE_RATIO * min(size, previous_size)
        close = bool(run) and same_size and top - previous_bottom <= _ROW_GAP_LINES * size
        if len(pieces) >= 2 and (close or not run):
            run.append((top, bottom, len(pieces)))
            rows += 1
            left = min(left, pieces[0][0]) if len(run) > 1 else pieces[0][0]
        elif len(pieces) == 1 and close and pieces[0][0] > left + _GAP_EMS * size:
            run.append((top, bottom, 1))
        else:
            close_run()
            run = [(top, bottom, len(pieces))] if len(pieces) >= 2 else []
            rows = len(run)
            left = pieces[0][0] if pieces else 0.0
        previous_bottom, previous_size = bottom, size
    close_run()
    return blocks


def _cleaned(rows: list[list[str | None]]) -> list[list[str]]:
    """Rows with their cells' white space normalised; empty rows and columns empty in every row dropped; a
    row of one cell that is not the first (a cell wrapped onto a second line) joined to the row above."""
    cells = [[" ".join((cell or "").split()) for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return []
    keep = [i for i in range(max(len(r) for r in cells)) if any(i < len(r) and r[i] for r in cells)]
    cells = [[row[i] if i < len(row) else "" for i in keep] for row in cells]
    joined: list[list[str]] = []
    for row in cells:
        filled = [i for i, cell in enumerate(row) if cell]
        if joined and len(filled) == 1 and filled[0] > 0:
            above = joined[-1]
            above[filled[0]] = f"{above[filled[0]]} {row[filled[0]]}".strip()
        else:
            joined.append(row)
    return joined


def _looks_like_table(region: Any, table: Any, rows: list[list[str]]) -> bool:
    if len(rows) < _MIN_ROWS or len(rows[0]) < 2:
        return False
    if sum(sum(1 for c in row if c) >= 2 for row in rows) < 0.8 * len(rows):
        return False
    cells = [c for row in rows for c in row if c]
    if any(_DOT_LEADER.search(c) for c in cells):
        return False
    lengths = sorted(len(c.split()) for c in cells)
    if lengths[len(lengths) // 2] > _MAX_MEDIAN_WORDS:
        return False
    if sum(n >= _LONG_CELL_WORDS for n in lengths) > _MAX_LONG_SHARE * len(lengths):
        return False
    chars = [c for c in region.chars if _inside(c, table.bbox) and c.get("text", "").strip()]
    if not chars or _monospaced(chars):
        return False
    if _cuts_words(region, table, rows) or _gaps_inside_cells(region, table):
        return False
    if _page_numbers(rows):
        return False
    return _header_set_apart(region, table, rows, chars)


def _monospaced(chars: list[dict[str, Any]]) -> bool:
    return all(_MONO.search(str(c.get("fontname", ""))) for c in chars)


def _inside(obj: dict[str, Any], bbox: tuple) -> bool:
    cx, cy = (obj["x0"] + obj["x1"]) / 2, (obj["top"] + obj["bottom"]) / 2
    return bbox[0] <= cx <= bbox[2] and bbox[1] <= cy <= bbox[3]


def _cuts_words(region: Any, table: Any, rows: list[list[str]]) -> bool:
    """Whether a word of the block is found whole in no cell: a column cut ran through it."""
    cell_words = {word for row in rows for cell in row for word in cell.split()}
    words = region.extract_words(x_tolerance_ratio=0.15)
    return any(w["text"] not in cell_words for w in words if _inside(w, table.bbox))


def _gaps_inside_cells(region: Any, table: Any) -> bool:
    """Whether two pieces of a line (text apart by a column gap) fall in one cell on more than a tenth of
    the lines: the columns found are not the columns there are (a reference card set in several columns)."""
    edges = sorted({float(cell[0]) for cell in table.cells})
    words = [w for w in region.extract_words(x_tolerance_ratio=0.15) if _inside(w, table.bbox)]
    lines = _pieces_per_line(words)
    crowded = 0
    for pieces in lines:
        columns = [sum(edge <= (left + right) / 2 for edge in edges) for left, right in pieces]
        crowded += len(set(columns)) < len(columns)
    return crowded > 0.1 * len(lines)


def _page_numbers(rows: list[list[str]]) -> bool:
    """Whether the rows are a table of contents or an index: a last column of page numbers in order, or
    cells that end in page numbers ("hsv, 39, 50")."""
    last = [row[-1] for row in rows[1:] if row[-1]]
    if len(last) >= _MIN_ROWS - 1 and all(c.isdigit() for c in last):
        numbers = [int(c) for c in last]
        if numbers == sorted(numbers):
            return True
    cells = [c for row in rows[1:] for c in row if c]
    return sum(bool(_PAGE_LIST.search(c)) for c in cells) > 0.5 * len(cells)


def _header_set_apart(region: Any, table: Any, rows: list[list[str]], chars: list[dict[str, Any]]) -> bool:
    header, body = rows[0], rows[1:]
    if any(_NUMBER.match(c) for c in header if c) or sum(1 for c in header if c) < 2:
        return False
    row_tops = sorted({round(float(c["top"])) for c in chars})
    first_top = row_tops[0]
    header_chars = [c for c in chars if float(c["top"]) < first_top + 2]
    body_chars = [c for c in chars if float(c["top"]) >= first_top + 2]
    if not body_chars:
        return False
    if {c.get("fontname") for c in header_chars}.isdisjoint({c.get("fontname") for c in body_chars}):
        return True  # a bold (or otherwise other) header font
    header_bottom = max(float(c["bottom"]) for c in header_chars)
    next_top = min(float(c["top"]) for c in body_chars)
    if _ruled_between(region, header_bottom, next_top) and not _every_row_ruled(region, body_chars):
        return True  # a rule under the header (and not under every row), as booktabs draws
    for i, name in enumerate(header):
        column = [row[i] for row in body if i < len(row) and row[i]]
        if name and len(column) >= 2 and sum(bool(_NUMBER.match(c)) for c in column) >= 0.8 * len(column):
            return True  # words over a column of numbers
    return False


def _ruled_between(region: Any, top: float, bottom: float) -> bool:
    return any(top - 1 <= float(edge["top"]) <= bottom + 1 for edge in region.horizontal_edges)


def _every_row_ruled(region: Any, body_chars: list[dict[str, Any]]) -> bool:
    """Whether a rule also runs between the first two data rows: then a rule says nothing of a header."""
    tops = sorted({round(float(c["top"])) for c in body_chars})
    if len(tops) < 2:
        return False
    first_bottom = max(float(c["bottom"]) for c in body_chars if round(float(c["top"])) == tops[0])
    return _ruled_between(region, first_bottom, tops[1])
