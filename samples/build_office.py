"""Build samples/docs/travel_and_expenses.docx, the Word file of the README demo (`make run` ingests it).

The .docx is committed, so users need no python-docx to run the demo; rerun this only to change it:

    python samples/build_office.py

The fund, its policy and its numbers are fictional, like the rest of samples/docs. The document has what a
Word loader must keep: headings (sections), a table whose rows are answers (per diem by city), and a list.
"""

from __future__ import annotations

from pathlib import Path

from docx import Document

OUT = Path(__file__).resolve().parent / "docs" / "travel_and_expenses.docx"

PER_DIEM = [
    ("City", "Per diem (EUR)", "Hotel cap (EUR)"),
    ("Tallinn", "45", "140"),
    ("Krakow", "38", "120"),
    ("Leiden", "52", "165"),
    ("Gothenburg", "56", "170"),
    ("Dublin", "61", "190"),
]


def build(out: Path = OUT) -> Path:
    doc = Document()
    doc.core_properties.title = "Halvorsen Ridge Capital: travel and expenses policy"
    doc.add_heading("Travel and expenses policy", level=1)
    doc.add_paragraph(
        "This policy applies to partners, associates and board observers of Halvorsen Ridge Capital who travel "
        "to visit portfolio companies. It was approved by the management committee in September 2024."
    )
    doc.add_heading("Booking travel", level=2)
    doc.add_paragraph(
        "Trains are booked in second class for journeys under four hours. Flights are booked in economy; "
        "business class needs the managing partner's written approval before the booking is made."
    )
    doc.add_heading("Per diem and hotels", level=2)
    doc.add_paragraph("The daily allowance covers meals and local transport. Hotel costs are refunded up to "
                      "the cap for the city.")
    table = doc.add_table(rows=len(PER_DIEM), cols=len(PER_DIEM[0]))
    for r, row in enumerate(PER_DIEM):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    doc.add_heading("Submitting a claim", level=2)
    for step in (
        "Submit the claim within 30 days of the trip's last day.",
        "Attach an itemised receipt for every expense above 25 EUR.",
        "Name the portfolio company visited and the purpose of the visit.",
    ):
        doc.add_paragraph(step, style="List Number")
    out.parent.mkdir(parents=True, exist_ok=True)
    doc.save(out)
    return out


if __name__ == "__main__":
    print(build())
