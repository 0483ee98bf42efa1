"""Text from an image of a page: an `OcrEngine` reads a PIL image; Tesseract is the one funnel ships.

Tesseract was chosen by measurement (bench/ocr_engines.py, BENCHMARKS.md "OCR engines", 2026-12-04): on 10
English and 10 Korean PDF pages rendered at 300 dpi it kept more of the text layer's words than RapidOCR, in
less time and a tenth of the memory, and it reads Korean from Debian's tesseract-ocr-kor, while RapidOCR's
wheel has Chinese/English models only. It is a program, not a Python package: `apt-get install
--no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-kor` (`make ocr`).

funnel does not guess the language of a scan: Tesseract reads with every one of English and Korean whose
data is installed ("eng+kor"), which costs English pages a little time and no accuracy in the measurement.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
from typing import Any, Protocol

# Pages are rendered for OCR at this resolution (Tesseract's accuracy is measured at 150 and 300 dpi).
OCR_DPI = 300
# The largest image funnel decodes or renders for OCR: a letter page at 600 dpi is 34 megapixels; PIL's own
# guard starts at 89.
MAX_PIXELS = 50_000_000
# One page may take this long; a page that takes longer fails its file (one line), not the ingest.
PAGE_SECONDS = 120.0
# English and Korean, those installed; funnel's BM25 analyzers and the measurement cover these two.
LANGUAGES = ("eng", "kor")
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
