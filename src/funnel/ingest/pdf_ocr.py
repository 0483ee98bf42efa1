"""A PDF page with no text layer (a scan) is rendered with pdfium (pypdfium2) and read by OCR
(`funnel.ingest.ocr`); pages that have text are never OCR'd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from funnel.ingest.ocr import MAX_PIXELS, OCR_DPI, OcrEngine, OcrFailed, default_engine, paragraphs
from funnel.ingest.pdf_layout import Line, PdfiumPages

# OCR text has no geometry: lines 12 points apart, paragraphs 24, so the paragraph rule cuts where the
# engine left a blank line. Size 0 and no characters counted keep these lines out of heading detection.
_LINE_STEP = 12.0
_PARAGRAPH_STEP = 24.0
_LISTED = 10  # dropped pages named in a warning; past these, how many more


def has_text_layer(page: Any) -> bool:
    """Whether a pdfplumber page has any character that is not blank."""
    return any(char.get("text", "").strip() for char in page.chars)


class ScannedPages(PdfiumPages):
    """Reads the PDF's scanned pages, opening the document with pdfium on the first. After the engine
    fails once (missing, failing, too slow) no other page is tried, and `failure` says why."""

    def __init__(self, path: Path, engine: OcrEngine | None = None, dpi: int = OCR_DPI):
        super().__init__(path)
        self.engine = engine
        self.dpi = dpi
        self.failure: str | None = None
        self.read_pages = 0
        self.dropped: list[int] = []  # the scanned pages (1-based) not read because OCR failed

    def warnings(self) -> tuple[str, ...]:
        """The line saying which scanned pages went unread and why; none when OCR read them all."""
        if not self.dropped:
            return ()
        pages = ", ".join(str(n) for n in self.dropped[:_LISTED])
        more = f" and {len(self.dropped) - _LISTED} more" if len(self.dropped) > _LISTED else ""
        plural = "s" if len(self.dropped) > 1 else ""
        return (f"{len(self.dropped)} scanned page{plural} not read (p. {pages}{more}): OCR failed: "
                f"{self.failure}",)

    def lines(self, index: int) -> list[Line]:
        """The OCR'd lines of page `index` (0-based); none once the engine has failed."""
        if self.failure is not None:
            self.dropped.append(index + 1)
            return []
        try:
            text = self._engine().read(self._render(index))
        except OcrFailed as e:
            self.failure = str(e)
            self.dropped.append(index + 1)
            return []
        self.read_pages += 1
        lines, top = [], 0.0
        for paragraph in paragraphs(text):
            for row in paragraph:
                lines.append(Line(row, top=top, bottom=top + 10.0, size=0.0, n_chars=0))
                top += _LINE_STEP
            top += _PARAGRAPH_STEP
        return lines

    def _engine(self) -> OcrEngine:
        if self.engine is None:
            self.engine = default_engine()
        return self.engine

    def _render(self, index: int) -> Any:
        page = self.page(index)
        width, height = page.get_size()  # points
        # A poster-sized page is rendered smaller rather than into gigabytes.
        scale = min(self.dpi / 72, (MAX_PIXELS / max(1.0, width * height)) ** 0.5)
        try:
            return page.render(scale=scale, grayscale=True).to_pil()
        finally:
            page.close()
