"""Make samples/docs/administrator_letter_scan.pdf: a one-page letter as a scanner gives it, an image with no
text layer, so `make run`'s demo ingests a scan (read by OCR, funnel.ingest.ocr).

    .venv/bin/python tools/make_sample_scan.py   (needs Debian's fonts-dejavu-core; the PDF is checked in)

300 dpi, one bit per pixel (a fax-like scan, a few tens of KB), half a letter page, slightly rotated as paper
in a feeder is.
"""

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

OUT = Path(__file__).resolve().parent.parent / "samples" / "docs" / "administrator_letter_scan.pdf"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
DPI = 300
LINES = [
    "HALVORSEN RIDGE CAPITAL - FUND II",
    "Letter from the fund administrator, 2 December 2024",
    "",
    "Dear partners,",
    "",
    "The auditors, Lindqvist & Moe, will begin the 2024 annual audit on",
    "13 January 2025 and expect to sign the fund's accounts by 28 March 2025.",
    "Each portfolio company is asked to send its year-end trial balance to",
    "the finance lead no later than 20 January.",
    "",
    "The auditors will also visit the Pellucid Bio laboratory in the week of",
    "3 February to observe the count of reagent inventory. Questions about",
    "the timetable go to the fund administrator's office in Oslo.",
    "",
    "Yours faithfully,",
    "Marit Solberg, fund administrator",
]


def main() -> None:
    font = ImageFont.truetype(FONT, size=round(11 / 72 * DPI))  # 11 point
    page = Image.new("L", (int(8.5 * DPI), int(5.5 * DPI)), 255)
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(LINES):
        draw.text((int(0.9 * DPI), int(0.6 * DPI) + i * round(15 / 72 * DPI)), line, font=font, fill=0)
    page = page.rotate(0.4, resample=Image.BICUBIC, fillcolor=255)
    page.convert("1").save(OUT, "PDF", resolution=DPI)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
