"""Build samples/docs/portfolio_companies.pdf, the sample PDF of the README demo and the seed-001 replay.

The PDF is committed, so users need no reportlab; rerun this only to change it:

    python samples/build_pdf.py

The companies, people and fund are fictional. The one fact the demo asks about, who runs Zentara
Robotics, is stated only in the table: the prose names the companies but never their CEOs, which is
exactly the situation in which a reranker trained on prose passages buries the right chunk.
"""

from __future__ import annotations

from pathlib import Path

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.lib.units import cm
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

OUT = Path(__file__).resolve().parent / "docs" / "portfolio_companies.pdf"

COMPANIES = [
    ("Company", "CEO", "Employees", "Founded", "HQ", "Sector"),
    ("Zentara Robotics", "Iris Kallas", "287", "2018", "Tallinn", "Warehouse robotics"),
    ("Brightmoor Analytics", "Tomasz Wierzba", "142", "2016", "Krakow", "Supply-chain analytics"),
    ("Pellucid Bio", "Amara Okonkwo", "96", "2020", "Leiden", "Diagnostics"),
    ("Ostrava Grid Systems", "Henrik Dahlqvist", "354", "2014", "Gothenburg", "Energy storage"),
    ("Quillfeather Learning", "Priya Raman", "61", "2021", "Dublin", "Education software"),
    ("Solvane Maritime", "Jonas Eberhardt", "210", "2015", "Rotterdam", "Port logistics"),
    ("Tindra Health", "Lucia Ferraro", "178", "2019", "Lisbon", "Digital health"),
]

LETTER = [
    "This review covers the third full year of Halvorsen Ridge Capital Fund II. The fund closed its "
    "final commitments in early 2022 and is now fully invested across seven companies in northern and "
    "western Europe. Every company in the portfolio grew revenue during the year, although at very "
    "different speeds, and none required an emergency financing round.",
    "The year was shaped by two forces. Interest rates stayed high for longer than most of our "
    "companies had planned for, which made customers slower to sign multi-year contracts. At the same "
    "time, labour shortages in logistics and healthcare pushed buyers towards automation and software "
    "that saves staff time. Companies selling into those two markets had their best year so far.",
    "We made no new platform investments in 2024. Follow-on capital went to three companies, and the "
    "reserves we hold for the remaining four are sufficient for at least eighteen months of planned "
    "spending. Net asset value rose by eleven percent over the year after fees.",
]

AT_A_GLANCE = (
    "The table below lists each portfolio company with its chief executive, its headcount at the end "
    "of December 2024, the year it was founded, the city where it is headquartered and its sector. "
    "Headcount includes full-time contractors who have worked for the company for more than six months."
)

AFTER_TABLE = (
    "Combined headcount across the portfolio reached 1,328 people at year end, up from 1,140 a year "
    "earlier. Most new hires were engineers and field service technicians; administrative headcount "
    "was flat."
)

HIGHLIGHTS = [
    ("Zentara Robotics",
     "Zentara Robotics doubled the number of warehouses running its autonomous picking fleet, from "
     "nine to eighteen sites, and signed its first customer in the United States. Its P3 picker now "
     "handles cold-storage aisles down to minus twenty degrees. Gross margin on hardware improved after "
     "the company moved final assembly from a contract manufacturer to its own plant near Tallinn."),
    ("Brightmoor Analytics",
     "Brightmoor Analytics released a demand forecasting module that retailers can run on their own "
     "data without an integration project. Net revenue retention was 118 percent. The company chose to "
     "slow hiring in the second half to extend its runway into 2026."),
    ("Pellucid Bio",
     "Pellucid Bio received CE marking for its rapid sepsis panel in September and began paid pilots "
     "in four hospitals. Revenue remains small, and the next eighteen months depend on reimbursement "
     "decisions in the Netherlands and Germany."),
    ("Ostrava Grid Systems",
     "Ostrava Grid Systems commissioned its largest battery site to date, a forty megawatt-hour "
     "installation serving an industrial park. The company is the oldest in the portfolio and the "
     "closest to an exit; we expect to begin a sale process in 2026."),
    ("Quillfeather Learning",
     "Quillfeather Learning signed contracts with two further national school networks. Churn among "
     "individual teachers on the free plan remains high, and the team is testing a simpler onboarding "
     "flow to address it."),
    ("Solvane Maritime",
     "Solvane Maritime extended its berth-scheduling software to three more ports on the North Sea. "
     "Average vessel waiting time at its customer terminals fell by a fifth compared with 2023."),
    ("Tindra Health",
     "Tindra Health launched its remote monitoring service for heart failure patients with two regional "
     "health authorities in Portugal. Clinician time spent per patient fell by roughly a third in the "
     "first six months of the programme."),
]

OUTLOOK = [
    "For 2025 we expect slower growth in the companies that sell long contracts to public buyers, and "
    "continued strength in automation. Our priorities are to prepare Ostrava Grid Systems for a sale, "
    "to help Pellucid Bio through its reimbursement decisions, and to support Zentara Robotics as it "
    "builds a service organisation in North America.",
    "The partners thank the management teams and employees of every portfolio company for a demanding "
    "and productive year.",
]


def build(out: Path = OUT) -> Path:
    styles = getSampleStyleSheet()
    body, h1, h2 = styles["BodyText"], styles["Title"], styles["Heading2"]
    story: list = [
        Paragraph("Annual Portfolio Review 2024", h1),
        Paragraph("Halvorsen Ridge Capital, Fund II. Prepared for limited partners, February 2025.", body),
        Paragraph("Letter from the partners", h2),
    ]
    story += [Paragraph(p, body) for p in LETTER]
    story += [PageBreak(), Paragraph("Portfolio companies", h2), Paragraph(AT_A_GLANCE, body)]
    story += [Spacer(1, 0.4 * cm)]
    widths = [4.0 * cm, 3.2 * cm, 2.0 * cm, 1.8 * cm, 2.4 * cm, 3.8 * cm]
    table = Table(COMPANIES, colWidths=widths, repeatRows=1)  # a page break repeats the header row
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.5, colors.grey),
                ("BACKGROUND", (0, 0), (-1, 0), colors.lightgrey),
                ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
                ("FONTSIZE", (0, 0), (-1, -1), 9),
            ]
        )
    )
    story += [table, Spacer(1, 0.4 * cm), Paragraph(AFTER_TABLE, body)]
    story += [Paragraph("Company highlights", h2)]
    for _name, text in HIGHLIGHTS[:3]:
        story.append(Paragraph(text, body))
    story += [PageBreak(), Paragraph("Company highlights (continued)", h2)]
    for _name, text in HIGHLIGHTS[3:]:
        story.append(Paragraph(text, body))
    story += [Paragraph("Outlook for 2025", h2)]
    story += [Paragraph(p, body) for p in OUTLOOK]

    out.parent.mkdir(parents=True, exist_ok=True)
    doc = SimpleDocTemplate(
        str(out),
        pagesize=A4,
        title="Annual Portfolio Review 2024",
        author="Halvorsen Ridge Capital (fictional)",
        invariant=1,  # byte-identical output on every run: the committed file changes only with its content
    )
    doc.build(story)
    return out


if __name__ == "__main__":
    print(build())
