"""Chunk boundaries and heading trails in every script (issue 31): never inside a word, never inside a
character. Offline; a stand-in tokenizer cuts text the way the packaged MiniLM's BERT tokenizer does, and
one test (marked `model`) runs the real one on the issue's own sentence."""

from __future__ import annotations

import re
import unicodedata

import pytest
from helpers import packaged_embedder

from funnel.ingest import chunk_document, context_line
from funnel.ingest.split import Cut, cut_at, sentences
from funnel.types import Document, LoadedDocument, Section, SectionKind

# The issue's text: a finance team's approval rule, in Korean (words are separated by spaces).
KOREAN = (
    "재무팀장의 별도 승인이 필요한 경우 구매 요청서는 예산 담당자에게 먼저 전달되며 담당자는 계약 조건과 "
    "지급 일정을 검토한 뒤 결과를 회신하고 회신을 받은 부서는 변경 사항을 반영하여 다시 제출한다"
)


class BertLikeTokenizer:
    """Tokens the way a BERT WordPiece tokenizer makes them, offsets included.

    A Hangul syllable becomes two or three jamo tokens that all carry the syllable's offsets; an ideograph,
    kana or Thai letter is a token of its own; punctuation is a token; other words are 3-character pieces.
    """

    max_tokens = 64
    _RUN = re.compile(r"[\uac00-\ud7a3]|[\u0e00-\u0e7f\u3040-\u30ff\u4e00-\u9fff]|[^\W_]{1,3}|\S")

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for m in self._RUN.finditer(text):
            syllable = m.group()
            jamo = len(unicodedata.normalize("NFD", syllable)) if "\uac00" <= syllable <= "\ud7a3" else 1
            out.extend([m.span()] * jamo)
        return out

    def count_tokens(self, text: str) -> int:
        return len(self.token_offsets(text))


def doc_of(text: str, heading: str | None = None, title: str = "회의록.md") -> LoadedDocument:
    document = Document(doc_id="d", path=title, title=title, kind="markdown", content_hash="h")
    section = Section(text=text, kind=SectionKind.PROSE, heading=heading)
    return LoadedDocument(document=document, sections=(section,))


def bodies(loaded: LoadedDocument, chunks) -> list[str]:
    prefix = context_line(loaded.document, loaded.sections[0])
    out = []
    for chunk in chunks:
        first, _, rest = chunk.text.partition("\n")
        out.append(rest if rest and prefix.startswith(first) else chunk.text)
    return out


def assert_cut_between_words(text: str, pieces: list[str]) -> None:
    """Every piece is whole words of `text`, and together they are all of it."""
    words = set(text.split())
    for piece in pieces:
        assert set(piece.split()) <= words, f"a word was cut: {piece!r}"
    assert "".join("".join(pieces).split()) == "".join(text.split())


@pytest.mark.parametrize("budget", [20, 28, 40, 64])
def test_korean_chunks_end_between_words(budget):
    loaded = doc_of(KOREAN)
    chunks = chunk_document(loaded, BertLikeTokenizer(), max_tokens=budget, overlap_sentences=0)
    assert len(chunks) > 1
    assert all(c.n_tokens <= budget for c in chunks)
    assert_cut_between_words(KOREAN, bodies(loaded, chunks))


def test_the_issues_cut_inside_byeoldo_is_gone():
    loaded = doc_of(KOREAN, title="x")
    chunks = chunk_document(loaded, BertLikeTokenizer(), max_tokens=17, overlap_sentences=0)
    texts = bodies(loaded, chunks)
    assert texts[:2] == ["재무팀장의", "별도 승인이"]  # was "재무팀장의 별" and "도 승인이 필요"
    assert not any(t.endswith("별") for t in texts) and not any(t.startswith("도 ") for t in texts)


@pytest.mark.parametrize("budget", [48, 64, 96])
def test_korean_heading_trail_keeps_whole_words(budget):
    heading = "재무 규정 > 구매 요청서의 별도 승인 절차와 예외 처리 기준"
    loaded = doc_of("승인이 필요하다.", heading=heading)
    (chunk,) = chunk_document(loaded, BertLikeTokenizer(), max_tokens=budget)
    trail = chunk.text.split("\n", 1)[0]
    full = context_line(loaded.document, loaded.sections[0])
    assert trail != full and full.startswith(trail)
    assert full[len(trail)] == " ", f"the trail stops inside a word: {trail!r}"


def test_no_trail_rather_than_half_a_word():
    loaded = doc_of("승인이 필요하다.", heading="재무 규정")
    (chunk,) = chunk_document(loaded, BertLikeTokenizer(), max_tokens=24)  # "회의록.md" alone is over 6
    assert chunk.text == "승인이 필요하다."


def test_latin_cyrillic_and_arabic_words_stay_whole():
    text = (
        "Die Übersicht der Straßenbauprojekte für 2026 wurde überarbeitet und genehmigt "
        "Обзор строительных проектов на следующий год утверждён финансовым отделом "
        "تمت الموافقة على مراجعة مشاريع البناء للعام المقبل من قبل الإدارة المالية"
    )
    loaded = doc_of(text)
    chunks = chunk_document(loaded, BertLikeTokenizer(), max_tokens=9, overlap_sentences=0)
    assert_cut_between_words(text, bodies(loaded, chunks))


def test_chinese_is_cut_after_its_punctuation_when_it_can_be():
    text = "会议决定、预算需要财务负责人另行批准、采购申请先交给预算负责人、负责人审核合同条件与付款时间、然后回复结果"
    loaded = doc_of(text)
    chunks = chunk_document(loaded, BertLikeTokenizer(), max_tokens=18, overlap_sentences=0)
    texts = bodies(loaded, chunks)
    assert len(texts) > 1 and "".join(texts) == text
    assert all(t.endswith("、") for t in texts[:-1]), texts


def test_japanese_and_thai_are_cut_between_characters_never_inside_one():
    # Decomposed kana (か + combining voiced mark = が) and Thai vowel signs are two code points, one character.
    japanese = unicodedata.normalize("NFD", "がぎぐげござじずぜぞだぢづでどばびぶべぼ" * 3)
    thai = "ที่ประชุมมีมติให้หัวหน้าฝ่ายการเงินอนุมัติแยกต่างหากก่อนส่งคำขอซื้อ" * 2
    for text in (japanese, thai):
        loaded = doc_of(text)
        chunks = chunk_document(loaded, BertLikeTokenizer(), max_tokens=7, overlap_sentences=0)
        texts = bodies(loaded, chunks)
        assert len(texts) > 1 and "".join(texts) == text
        assert not any(unicodedata.category(t[0]).startswith("M") for t in texts), texts


def test_korean_and_chinese_sentences_end_where_they_do():
    korean = "재무팀장의 별도 승인이 필요하다. 승인 후 구매를 진행한다. 결과는 회신한다."
    assert [korean[a:b] for a, b in sentences(korean, 0, len(korean))] == [
        "재무팀장의 별도 승인이 필요하다.", "승인 후 구매를 진행한다.", "결과는 회신한다."
    ]
    chinese = "预算需要另行批准。采购申请先交给负责人！结果呢？"
    assert [chinese[a:b] for a, b in sentences(chinese, 0, len(chinese))] == [
        "预算需要另行批准。", "采购申请先交给负责人！", "结果呢？"
    ]
    german = "Siehe die Liste. über alles. Übersicht folgt. Ende."  # lower case after a dot: no new sentence
    assert [german[a:b] for a, b in sentences(german, 0, len(german))] == [
        "Siehe die Liste. über alles.", "Übersicht folgt.", "Ende."
    ]


@pytest.mark.parametrize(
    ("text", "pos", "cut"),
    [
        ("별도 승인", 2, Cut.SPACE),
        ("별도", 1, Cut.IN_WORD),
        ("预算。采购", 3, Cut.PUNCTUATION),
        ("预算", 1, Cut.CHARACTER),
        ("state-of-the-art", 6, Cut.PUNCTUATION),
        ("don't", 3, Cut.IN_WORD),
        ("e\u0301t\u00e9", 1, Cut.NEVER),
        ("\U0001f469\u200d\U0001f4bb", 1, Cut.NEVER),
        (unicodedata.normalize("NFD", "별"), 1, Cut.NEVER),
    ],
)
def test_cut_at_ranks_places(text, pos, cut):
    assert cut_at(text, pos) == cut


# -- the real tokenizer -----------------------------------------------------------------------------------


@pytest.mark.model
def test_the_packaged_tokenizer_never_cuts_korean_inside_a_word():
    embedder = packaged_embedder()
    heading = "재무 규정 > 구매 요청서의 별도 승인 절차"
    loaded = doc_of(KOREAN, heading=heading)
    for budget in (24, 40, 64):
        chunks = chunk_document(loaded, embedder, max_tokens=budget, overlap_sentences=0)
        assert all(embedder.count_tokens(c.text) <= budget for c in chunks)
        assert_cut_between_words(KOREAN, bodies(loaded, chunks))
        trail = chunks[0].text.split("\n", 1)[0]
        full = context_line(loaded.document, loaded.sections[0])
        assert full.startswith(trail) and (trail == full or full[len(trail)] == " "), trail
