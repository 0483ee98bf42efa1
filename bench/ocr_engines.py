"""Which OCR engine should funnel use? Tesseract (Debian's, eng and kor) against RapidOCR (the
rapidocr-onnxruntime wheel's own PP-OCRv4 models) on real PDF pages that have a text layer (issue 32).

Each page is rendered to an image with pypdfium2 at 150 and 300 dpi; the engines read the image, and the
page's own text layer (pypdfium2) is the reference. Score per page: bag-of-words recall, precision and F1 of
lower-cased words (runs of letters and digits, Hangul included; order ignored, counts kept), averaged over
pages. Also: seconds per page and the peak RSS of whatever does the OCR (the tesseract process; for
RapidOCR the Python process that loads it, numpy and onnxruntime included). Each engine runs in a process of
its own so the RSS is its alone. Tesseract runs with
OMP_THREAD_LIMIT=1 (see TESSERACT_ENV); RapidOCR with its defaults.

    .venv/bin/python bench/ocr_engines.py [--pages 10] [--dpi 150,300] [--out bench/results/ocr_engines.json]

English pages: bench/data/realpdf/pdfs (bench/build_realpdf.sh); Korean: the PDFs of
bench/data/korean-docs/docs (bench/build_korean_docs.sh). Pages are picked deterministically: spread over
the files, each with at least 150 words (English) or 80 (Korean) in its text layer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
_WORD = re.compile(r"[^\W_]+")
SETS = {
    "English": (HERE / "data/realpdf/pdfs", 150),
    "Korean": (HERE / "data/korean-docs/docs", 80),
}
# engine name -> Tesseract's languages (the first is its primary one) per set; "tesseract kor+eng" is what
# funnel runs on a page whose language it does not know.
ENGINES = {
    "English": {"tesseract eng": "eng", "tesseract eng+kor": "eng+kor", "tesseract kor+eng": "kor+eng",
                "rapidocr": None},
    "Korean": {"tesseract kor": "kor", "tesseract eng+kor": "eng+kor", "tesseract kor+eng": "kor+eng",
               "rapidocr": None},
}


# One thread, as funnel runs it: on 2 busy cores Tesseract's OpenMP threads made a page ~6x slower
# (R-FAQ p.8 at 150 dpi: 11.6 s against 1.9 s).
TESSERACT_ENV = {**os.environ, "OMP_THREAD_LIMIT": "1"}


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def scores(ours: list[str], reference: list[str]) -> tuple[float, float, float]:
    a, b = Counter(ours), Counter(reference)
    common = sum((a & b).values())
    recall = common / max(1, sum(b.values()))
    precision = common / max(1, sum(a.values()))
    f1 = 2 * recall * precision / (recall + precision) if common else 0.0
    return recall, precision, f1


def pick_pages(folder: Path, n: int, min_words: int) -> list[tuple[Path, int, str]]:
    """(pdf, page index, text layer): round-robin over the PDFs, pages spread through each."""
    import pypdfium2 as pdfium

    candidates = []
    for pdf_path in sorted(folder.glob("*.pdf")):
        pdf = pdfium.PdfDocument(pdf_path)
        good = []
        for i in range(len(pdf)):
            text = pdf[i].get_textpage().get_text_range()
            if len(words(text)) >= min_words:
                good.append((pdf_path, i, text))
        step = max(1, len(good) // 4)
        candidates.append(good[step // 2 :: step])
        pdf.close()
    picked: list[tuple[Path, int, str]] = []
    while len(picked) < n and any(candidates):
        for pages in candidates:
            if pages and len(picked) < n:
                picked.append(pages.pop(0))
    return picked


def render(pages: list[tuple[Path, int, str]], dpi: int, folder: Path) -> list[Path]:
    import pypdfium2 as pdfium

    images = []
    for k, (pdf_path, index, _) in enumerate(pages):
        pdf = pdfium.PdfDocument(pdf_path)
        image = pdf[index].render(scale=dpi / 72, grayscale=True).to_pil()
        out = folder / f"{k:02d}-{dpi}.png"
        image.save(out)
        images.append(out)
        pdf.close()
    return images


def worker(engine: str, language: str | None, images: list[str]) -> None:
    """Read each image; print one JSON line: texts, seconds per page, peak RSS (MB) of the OCR."""
    texts, seconds = [], []
    if engine == "rapidocr":
        from rapidocr_onnxruntime import RapidOCR

        ocr = RapidOCR()
        for image in images:
            start = time.perf_counter()
            result, _ = ocr(image)
            seconds.append(time.perf_counter() - start)
            texts.append("\n".join(line[1] for line in result or []))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    else:
        for image in images:
            start = time.perf_counter()
            done = subprocess.run(["tesseract", image, "stdout", "-l", language, "--psm", "3"],
                                  capture_output=True, text=True, check=True, env=TESSERACT_ENV)
            seconds.append(time.perf_counter() - start)
            texts.append(done.stdout)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"texts": texts, "seconds": seconds, "rss_mb": rss}))


def run_engine(engine: str, language: str | None, images: list[Path]) -> dict:
    command = [sys.executable, __file__, "--worker", engine, language or "-", *map(str, images)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(pages_per_set: int, dpis: list[int], only: set[str] | None = None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (folder, min_words) in SETS.items():
            pages = pick_pages(folder, pages_per_set, min_words)
            references = [words(text) for _, _, text in pages]
            print(f"{name}: {len(pages)} pages: " + ", ".join(f"{p.name} p.{i + 1}" for p, i, _ in pages))
            for dpi in dpis:
                images = render(pages, dpi, Path(tmp))
                for engine, language in ENGINES[name].items():
                    if only and engine not in only:
                        continue
                    kind = "rapidocr" if engine == "rapidocr" else "tesseract"
                    result = run_engine(kind, language, images)
                    per_page = [scores(words(t), r) for t, r in zip(result["texts"], references)]
                    n = len(per_page)
                    rows.append({
                        "set": name, "engine": engine, "dpi": dpi, "pages": n,
                        "recall": sum(s[0] for s in per_page) / n,
                        "precision": sum(s[1] for s in per_page) / n,
                        "f1": sum(s[2] for s in per_page) / n,
                        "seconds_per_page": sum(result["seconds"]) / n, "peak_rss_mb": result["rss_mb"],
                        "page_f1": [round(s[2], 4) for s in per_page],
                    })
                    print_row(rows[-1])
    return rows


def print_row(row: dict) -> None:
    print(f"| {row['set']} | {row['engine']} | {row['dpi']} | {row['recall']:.3f} | {row['precision']:.3f} | "
          f"{row['f1']:.3f} | {row['seconds_per_page']:.2f} | {row['peak_rss_mb']:.0f} |", flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        engine, language, *images = sys.argv[2:]
        worker(engine, None if language == "-" else language, images)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10, help="pages per language")
    parser.add_argument("--dpi", default="150,300")
    parser.add_argument("--out", type=Path, default=HERE / "results/ocr_engines.json")
    parser.add_argument("--engines", help="only these, comma-separated ('tesseract kor+eng,rapidocr'); their "
                                          "rows replace the same rows of an existing --out")
    args = parser.parse_args()
    only = set(args.engines.split(",")) if args.engines else None
    version = subprocess.run(["tesseract", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    print("| set | engine | dpi | recall | precision | F1 | s/page | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    rows = measure(args.pages, [int(d) for d in args.dpi.split(",")], only)
    if only and args.out.exists():
        fresh = {(r["set"], r["engine"], r["dpi"]) for r in rows}
        old = json.loads(args.out.read_text())["rows"]
        kept = [r for r in old if (r["set"], r["engine"], r["dpi"]) not in fresh]
        rows = sorted(kept + rows, key=lambda r: (list(SETS).index(r["set"]), r["dpi"],
                                                  list(ENGINES[r["set"]]).index(r["engine"])))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"tesseract": version, "python": platform.python_version(), "cpus": os.cpu_count(),
            "metric": "bag-of-words recall/precision/F1 of lower-cased words against the text layer"}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
