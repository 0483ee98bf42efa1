"""Image loader: a scan or photo of text (PNG, JPEG, TIFF) read by OCR (`funnel.ingest.ocr`), a page per
frame (a multi-page TIFF is a document of pages).

An image's size is checked from its header before anything is decoded: a small file can claim 20,000 ×
20,000 pixels (a decompression bomb) and would take gigabytes to decode, so an image over MAX_PIXELS is
skipped with one line (`ocr.MAX_PIXELS`).
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import Any

from funnel.errors import IngestError
from funnel.ingest.ocr import MAX_PIXELS, OcrEngine, OcrFailed, default_engine, paragraphs
from funnel.ingest.text import file_document, read_file
from funnel.types import Kind, LoadedDocument, Section

KIND = Kind("image")
# An image this small in a folder is an icon or a badge, not a page: a folder ingest counts it and does not
# OCR it (a line of text at 200 dpi is already ~30 px tall and hundreds wide).
ICON_PIXELS = 160 * 160
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
TIFF_MAGICS = (b"II*\x00", b"MM\x00*")
LABEL = "PNG/JPEG/TIFF image"
MARK = "the signature of one at its start"
_PIL_PIXELS = re.compile(r"\((\d+) pixels\)")


def is_image(probe: Any) -> bool:
    """The content is a PNG, JPEG or TIFF (a `loaders.Probe`), whatever the file is called."""
    return probe.head.startswith((PNG_MAGIC, JPEG_MAGIC, *TIFF_MAGICS))


def is_icon(path: Path) -> bool:
    """Whether the image is too small to hold a page of text (read from its header, not decoded)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            width, height = image.size
    except Exception:  # not readable here: the loader says why, in its one line
        return False
    return width * height < ICON_PIXELS or min(width, height) < 24


def load_image(path: Path, doc_id: str, display_path: str, language: str | None = None, pages=None,
               engine: OcrEngine | None = None) -> LoadedDocument:
    """A section per frame that OCR finds text in, cited at its page (frame number); `pages(display_path,
    read, total)` is told before each frame is read and when all are (the signature of a `LOADERS` row's
    `read`, plus the engine)."""
    raw = read_file(path, display_path)
    image = _open(raw, display_path)
    engine = engine or default_engine()
    total = getattr(image, "n_frames", 1)
    sections = []
    try:
        for number in range(1, total + 1):
            if pages:
                pages(display_path, number - 1, total)
            frame = _frame(image, number, display_path)
            text = "\n\n".join(" ".join(p) for p in paragraphs(engine.read(frame)))
            if text:
                sections.append(Section(text=text, page=number))
    except OcrFailed as e:
        raise IngestError(display_path, str(e)) from e
    finally:
        image.close()
    if pages:
        pages(display_path, total, total)
    if not sections:
        raise IngestError(display_path, "OCR found no text in the image")
    return LoadedDocument(document=file_document(doc_id, display_path, KIND, raw), sections=tuple(sections))


def _open(raw: bytes, display_path: str) -> Any:
    """The image with its header read and nothing decoded; IngestError for a bomb or an unreadable file."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(raw))
        except Image.DecompressionBombError as e:  # over PIL's own limit (2 × 89 megapixels)
            found = _PIL_PIXELS.search(str(e))
            raise IngestError(display_path, _too_large(int(found.group(1)) if found else None)) from e
        except (OSError, SyntaxError, ValueError) as e:
            raise IngestError(display_path, f"not a readable image ({_first_line(e)})") from e
    _check_size(image, display_path)
    return image


def _frame(image: Any, number: int, display_path: str) -> Any:
    """Frame `number` (1-based), decoded, upright and in a mode OCR takes."""
    from PIL import Image, ImageOps

    try:
        image.seek(number - 1)
        _check_size(image, display_path)
        frame = ImageOps.exif_transpose(image)  # a phone photo stored sideways
        if "A" in frame.mode or "transparency" in frame.info:  # text on a transparent ground: put it on white
            frame = Image.alpha_composite(Image.new("RGBA", frame.size, "white"), frame.convert("RGBA"))
        return frame if frame.mode in ("L", "RGB") else frame.convert("L")
    except IngestError:
        raise
    except (OSError, SyntaxError, ValueError, EOFError) as e:  # truncated or corrupt data
        raise IngestError(display_path, f"not a readable image (page {number}: {_first_line(e)})") from e


def _check_size(image: Any, display_path: str) -> None:
    width, height = image.size
    if width * height > MAX_PIXELS:
        image.close()
        raise IngestError(display_path, _too_large(width * height, f"{width:,} × {height:,} pixels, "))


def _too_large(pixels: int | None, size: str = "") -> str:
    said = f"{pixels / 1e6:,.0f} megapixels" if pixels else "over 178 megapixels"
    return (f"image too large to read ({size}{said}; funnel reads at most {MAX_PIXELS // 1_000_000} "
            "megapixels: a decompression bomb?)")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:120] if text else type(error).__name__
