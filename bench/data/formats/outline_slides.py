"""A slide deck from an HTML document's outline (bench/build_formats.sh; issue 32).

    python outline_slides.py PAGE.html OUT.pptx

Slide 1: the page's <h1>. Then one slide per <h2>/<h3> section, in document order: the title is the heading,
the bullets the first sentence (two if the first is under 40 characters) of each of the section's first three
paragraphs or list items, all verbatim (white space collapsed); navigation and tables of contents are left
out, and so are sections with no text. Needs python-pptx.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser

from pptx import Presentation

SKIP = {"style", "script", "head"}
BLOCKS = {"p", "li", "dd"}


class Outline(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[list] = []  # [level, heading, [paragraphs]]
        self.title = ""
        self._skip = 0
        self._nav = 0
        self._text: list[str] | None = None
        self._kind = ""

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag in SKIP:
            self._skip += 1
        if tag == "div":
            if self._nav or cls in ("navheader", "navfooter", "toc"):
                self._nav += 1
        if self._skip or self._nav:
            return
        if tag in ("h1", "h2", "h3") or (tag in BLOCKS and self._text is None):
            self._text, self._kind = [], tag

    def handle_endtag(self, tag):
        if tag in SKIP:
            self._skip -= 1
        if tag == "div" and self._nav:
            self._nav -= 1
        if self._text is None or tag != self._kind:
            return
        text = re.sub(r"\s+", " ", "".join(self._text)).strip()
        self._text = None
        if not text:
            return
        if tag == "h1":
            self.title = self.title or text
        elif tag in ("h2", "h3"):
            self.sections.append([tag, text, []])
        elif self.sections:
            self.sections[-1][2].append(text)

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def first_sentence(text: str) -> str:
    """The paragraph's first sentence; two when the first is a short one such as "Yes."."""
    sentences = re.findall(r".+?[.?!](?:\s|$)|.+$", text)
    lead = sentences[0].strip()
    if len(lead) < 40 and len(sentences) > 1:
        lead += " " + sentences[1].strip()
    return lead


def main(page: str, out: str) -> None:
    outline = Outline()
    outline.feed(open(page, encoding="utf-8").read())
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[0])
    slide.shapes.title.text = outline.title
    slide.placeholders[1].text = ""
    for _tag, heading, paragraphs in outline.sections:
        if not paragraphs:
            continue
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = heading
        body = slide.placeholders[1].text_frame
        for number, paragraph in enumerate(paragraphs[:3]):
            target = body.paragraphs[0] if number == 0 else body.add_paragraph()
            target.text = first_sentence(paragraph)
    deck.core_properties.title = outline.title
    deck.save(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
