"""Text from an image of a page: an `OcrEngine` reads a PIL image; Tesseract is the one funnel ships.

Tesseract was chosen by measurement (bench/ocr_engines.py, BENCHMARKS.md "OCR engines", 2026-12-04): on 10
English and 10 Korean PDF pages rendered from their text layers, it kept more of the words (bag-of-words F1
0.985 English, 0.838 Korean at 200 dpi) than RapidOCR's wheel (0.965; 0.350: its models read Chinese and
English, not Hangul, and a Korean model is not in any wheel), in a third of the time and a tenth of the
memory (~2 s and ~90 MB a page against 6.5 s and 860 MB). It is a program, not a Python package: `apt-get
install --no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-kor` (`make ocr`).

funnel does not guess the language of a scan: Tesseract reads every page with Korean and English, Korean
first ("kor+eng", those of the two whose data is installed). Its first language leads: on the Korean pages
"eng+kor" scored 0.49 where "kor+eng" scored 0.83, and "kor" alone 0.63 (it misses the English in them); on
the English pages "kor+eng" reads as well as "eng" (0.981 against 0.982) in ~1.5x the time. Tesseract's own
script detection (OSD, `--psm 0`) was no way out: it costs ~2 s a page and called a Korean page Latin.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
from typing import Any, Protocol

# Pages are rendered for OCR at this resolution: of 150, 200 and 300 dpi, 200 read the Korean pages
# best (F1 0.838; 0.832 and 0.804) and the English ones nearly as well as 300 (0.985 against 0.987).
OCR_DPI = 200
# The largest image funnel decodes or renders for OCR: a letter page at 600 dpi is 34 megapixels; PIL's own
# guard starts at 89.
MAX_PIXELS = 50_000_000
# One page may take this long; a page that takes longer fails its file (one line), not the ingest.
PAGE_SECONDS = 120.0
# Korean and English, those installed, the first leading (module docstring); funnel's BM25 analyzers and the
# measurement cover these two.
LANGUAGES = ("kor", "eng")
INSTALL_HINT = ("install Tesseract: apt-get install --no-install-recommends tesseract-ocr tesseract-ocr-eng "
                "tesseract-ocr-kor (or `make ocr`)")


class OcrFailed(Exception):
    """The engine could not read a page: missing, failing or too slow. The message is one line, for the
    user; a loader turns it into its file's `IngestError`."""


class OcrEngine(Protocol):
    """Reads the text of one page image, paragraphs separated by a blank line."""

    name: str

    def read(self, image: Any) -> str: ...


class TesseractOcr:
    """Tesseract, run as a program (`tesseract stdin stdout`) for each page; cheap to build: the program
    is looked for on PATH when a page is read."""

    name = "tesseract"

    def __init__(self, languages: tuple[str, ...] = LANGUAGES, page_seconds: float = PAGE_SECONDS,
                 program: str = "tesseract"):
        self.languages = languages
        self.page_seconds = page_seconds
        self.program = program

    def read(self, image: Any) -> str:
        program = shutil.which(self.program)
        if program is None:
            raise OcrFailed(f"OCR needs Tesseract, which is not installed (no `{self.program}` on PATH); "
                            + INSTALL_HINT)
        png = io.BytesIO()
        image.save(png, format="PNG")
        command = [program, "stdin", "stdout", "-l", self._languages(program)]
        try:
            done = subprocess.run(command, input=png.getvalue(), capture_output=True,
                                  timeout=self.page_seconds, env=_ONE_THREAD, check=False)
        except subprocess.TimeoutExpired as e:
            raise OcrFailed(f"OCR of a page took over {self.page_seconds:g} s and was stopped") from e
        except OSError as e:
            raise OcrFailed(f"Tesseract could not be run ({e.strerror or e})") from e
        if done.returncode != 0:
            raise OcrFailed(f"Tesseract failed (exit {done.returncode}: {_last_line(done.stderr)})")
        return done.stdout.decode("utf-8", errors="replace")

    def _languages(self, program: str) -> str:
        installed = _installed_languages(program)
        chosen = [language for language in self.languages if language in installed]
        if not chosen:
            raise OcrFailed(f"Tesseract has no {' or '.join(self.languages)} language data; " + INSTALL_HINT)
        return "+".join(chosen)


# On 2 busy cores Tesseract's OpenMP threads made a page ~6x slower (bench/ocr_engines.py); a page is one
# thread, and other work (embedding) uses the other core.
_ONE_THREAD = {**os.environ, "OMP_THREAD_LIMIT": "1"}


@functools.lru_cache(maxsize=8)
def _installed_languages(program: str) -> frozenset[str]:
    try:
        done = subprocess.run([program, "--list-langs"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    # The first line is "List of available languages in ...:"; Tesseract 4 writes the list to stderr.
    lines = (done.stdout + done.stderr).decode("utf-8", errors="replace").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("List of"))


def _last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:160] if lines else "no message"


def default_engine() -> OcrEngine:
    return TesseractOcr()


def paragraphs(text: str) -> list[list[str]]:
    """OCR text as paragraphs (blank-line separated), each a list of its lines, whitespace normalised."""
    found: list[list[str]] = [[]]
    for raw in text.replace("\f", "\n").splitlines():
        line = " ".join(raw.split())
        if line:
            found[-1].append(line)
        elif found[-1]:
            found.append([])
    return [paragraph for paragraph in found if paragraph]
