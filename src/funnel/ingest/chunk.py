"""Token-aware chunking: every chunk fits the embedder's window, measured by the embedder's own tokenizer.

A chunk that is longer than the model's window is silently truncated when it is embedded, and the cut-off
part can then never be found by dense search. So budgets are counted with `tokenizer.count_tokens`, and
the final text of every chunk is counted again before it is emitted.

Each section is cut into atoms (sentences, table rows, code lines; pieces of them only when one alone is
too big), atoms are packed greedily, and a chunk's body is always one contiguous slice of its section, so
line numbers stay exact. Chunks never cross a section, hence never a PDF page or a Markdown heading.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Protocol

from funnel.errors import ConfigError
from funnel.ingest.split import Cut, cells, code_lines, cut_at, lines, paragraphs, sentences, strip_span
from funnel.types import Chunk, Document, LoadedDocument, Section, SectionKind


class Tokenizer(Protocol):
    """The part of an `Embedder` the chunker needs."""

    max_tokens: int

    def count_tokens(self, text: str) -> int: ...

    def token_offsets(self, text: str) -> list[tuple[int, int]]: ...


# The context line may take at most this share of a chunk's budget; the rest is for content.
_PREFIX_SHARE = 4
@dataclass(frozen=True)
class _Atom:
    """An unsplittable span [start, end) of a section's text."""

    start: int
    end: int
    tokens: int
    group: int  # paragraph, table row or code block it belongs to; packing prefers to break between groups
    sentence: bool = False  # a whole sentence, so it may be repeated as overlap


def chunk_document(
    doc: LoadedDocument,
    tokenizer: Tokenizer,
    max_tokens: int | None = None,
    overlap_sentences: int = 1,
) -> list[Chunk]:
    """Chunks of `doc`, each with `tokenizer.count_tokens(chunk.text) <= max_tokens`.

    `max_tokens` defaults to the tokenizer's own; `overlap_sentences` repeats that many sentences when
    a paragraph is cut between two chunks.
    """
    budget = tokenizer.max_tokens if max_tokens is None else max_tokens
    if budget < 1:
        raise ConfigError(f"max_tokens must be at least 1, got {budget}")
    if overlap_sentences < 0:
        raise ConfigError(f"overlap_sentences must be 0 or more, got {overlap_sentences}")
    chunks: list[Chunk] = []
    for section in doc.sections:
        _SectionChunker(doc.document, section, tokenizer, budget, overlap_sentences, chunks).run()
    return chunks


def context_line(document: Document, section: Section) -> str:
    """What the chunk is about, before its content: "report.pdf > Companies".

    Code uses the path, not the file name: in a repository the folders carry meaning and names repeat.
    """
    name = document.path if document.kind == "code" else document.title
    return f"{name} > {section.heading}" if section.heading else name


class _SectionChunker:
    def __init__(
        self,
        document: Document,
        section: Section,
        tokenizer: Tokenizer,
        budget: int,
        overlap: int,
        out: list[Chunk],
    ):
        self.document = document
        self.section = section
        self.text = section.text
        self.tok = tokenizer
        self.budget = budget
        self.overlap = overlap
        self.out = out
        self._newline_offsets: list[int] | None = None
        self.prefix = self._fit_prefix(context_line(document, section))
        prefix_cost = tokenizer.count_tokens(self.prefix + "\n") if self.prefix else 0
        self.body_budget = max(1, budget - prefix_cost)

    def run(self) -> None:
        atoms = self._atoms()
        for group in self._pack(atoms):
            self._emit(group[0].start, group[-1].end, group)

    # -- cutting into atoms -------------------------------------------------------------------------

    def _atoms(self) -> list[_Atom]:
        if self.section.kind == SectionKind.TABLE:
            return self._table_atoms()
        if self.section.kind == SectionKind.CODE:
            return self._code_atoms()
        return self._prose_atoms()

    def _prose_atoms(self) -> list[_Atom]:
        atoms: list[_Atom] = []
        for group, (start, end, fenced) in enumerate(paragraphs(self.text)):
            if fenced:  # a code block is kept whole when it fits, else cut at lines like code
                atoms.extend(self._fit(start, end, group, sentence=False, splitters=(code_lines,)))
                continue
            for s_start, s_end in sentences(self.text, start, end):
                atoms.extend(self._fit(s_start, s_end, group, sentence=True, splitters=(lines,)))
        return atoms

    def _table_atoms(self) -> list[_Atom]:
        # A row carries its own headers, so rows are atoms; a row too long for a chunk is cut at cells.
        atoms: list[_Atom] = []
        for group, (start, end) in enumerate(lines(self.text, 0, len(self.text))):
            atoms.extend(self._fit(start, end, group, sentence=False, splitters=(cells,)))
        return atoms

    def _code_atoms(self) -> list[_Atom]:
        whole = self._atom(0, len(self.text), 0)
        if whole.tokens <= self.body_budget:
            return [whole]
        atoms: list[_Atom] = []
        group = 0
        previous_end = 0
        for start, end in code_lines(self.text, 0, len(self.text)):
            if self.text.count("\n", previous_end, start) > 1:
                group += 1  # a blank line: a natural place to break a long definition
            atoms.extend(self._fit(start, end, group, sentence=False, splitters=()))
            previous_end = end
        return atoms

    def _atom(self, start: int, end: int, group: int, sentence: bool = False) -> _Atom:
        return _Atom(start, end, self.tok.count_tokens(self.text[start:end]), group, sentence)

    def _fit(self, start: int, end: int, group: int, sentence: bool, splitters: tuple) -> list[_Atom]:
        """The span as one atom if it fits; else cut by the first splitter that cuts it; tokens last."""
        atom = self._atom(start, end, group, sentence)
        if atom.tokens <= self.body_budget:
            return [atom]
        for splitter in splitters:
            parts = splitter(self.text, start, end)
            if len(parts) > 1:
                out: list[_Atom] = []
                for p_start, p_end in parts:
                    out.extend(self._fit(p_start, p_end, group, False, splitters))
                return out
        return [
            self._atom(p_start, p_end, group)
            for p_start, p_end in self._token_pieces(start, end, self.body_budget)
        ]

    def _token_pieces(self, start: int, end: int, budget: int) -> list[tuple[int, int]]:
        """Cut at token boundaries into pieces of at most `budget` tokens, not inside a word if possible.

        Pieces cover the whole span: characters the tokenizer skips (punctuation, for some) are kept.
        """
        offsets = [(a + start, b + start) for a, b in self.tok.token_offsets(self.text[start:end]) if b > a]
        pieces: list[tuple[int, int]] = []
        i, piece_start = 0, start
        while i < len(offsets):
            j = min(i + budget, len(offsets))
            if j < len(offsets):
                j = self._best_cut(offsets, i, j)
            while True:
                piece_end = offsets[j][0] if j < len(offsets) else end
                piece = strip_span(self.text, piece_start, piece_end)
                if j - 1 <= i or self.tok.count_tokens(self.text[piece[0] : piece[1]]) <= budget:
                    break
                j = self._best_cut(offsets, i, j - 1)
            pieces.append(piece)
            i, piece_start = j, piece_end
        return pieces or [(start, end)]

    def _best_cut(self, offsets: list[tuple[int, int]], i: int, j: int) -> int:
        """The token in (i, j] to cut before: the last one at the best kind of place (`Cut`), else j.

        A sub-word cut can re-tokenize into more tokens, and reads badly. Hangul is where it bit: a BERT
        tokenizer splits each syllable into several jamo tokens that all carry the syllable's offsets, so
        "token k starts where token k-1 ends" held only between syllables, and the cut landed inside a word.
        """
        best, best_cut = j, Cut.NEVER
        for k in range(j, i, -1):
            if offsets[k][0] < offsets[k - 1][1]:
                continue  # pieces of one character
            cut = cut_at(self.text, offsets[k][0])
            if cut < Cut.IN_WORD and offsets[k][0] > offsets[k - 1][1]:
                cut = Cut.SPACE  # the tokenizer skipped something here: a space, or punctuation it drops
            if cut < best_cut:
                best, best_cut = k, cut
                if cut == Cut.SPACE:
                    break
        return best

    # -- packing ------------------------------------------------------------------------------------

    def _pack(self, atoms: list[_Atom]) -> list[list[_Atom]]:
        group_tokens: dict[int, int] = {}
        for atom in atoms:
            group_tokens[atom.group] = group_tokens.get(atom.group, 0) + atom.tokens
        packs: list[list[_Atom]] = []
        current: list[_Atom] = []
        used = 0
        for atom in atoms:
            starts_group = bool(current) and atom.group != current[-1].group
            whole_group = group_tokens[atom.group]
            # A table row cut at its cells is read alone: its pieces share no chunk with other rows.
            after_cut_row = bool(current) and group_tokens[current[-1].group] > self.body_budget
            is_cut_row = whole_group > self.body_budget
            isolate = self.section.kind == SectionKind.TABLE and (is_cut_row or after_cut_row)
            # Keep a paragraph (row, block) whole when it would fit a chunk of its own.
            keep_whole = used + whole_group > self.body_budget and whole_group <= self.body_budget
            if starts_group and (isolate or keep_whole):
                current = self._close(packs, current, atom, mid_group=False)
                used = sum(a.tokens for a in current)
            elif current and used + atom.tokens > self.body_budget:
                current = self._close(packs, current, atom, mid_group=not starts_group)
                used = sum(a.tokens for a in current)
            current.append(atom)
            used += atom.tokens
        if current:
            packs.append(current)
        return packs

    def _close(
        self, packs: list[list[_Atom]], current: list[_Atom], following: _Atom, mid_group: bool
    ) -> list[_Atom]:
        """Finish `current`; return what the next chunk starts with before `following`."""
        title = current[-1]
        if (
            len(current) > 1
            and self._is_title(title, current[-2])
            and title.tokens + following.tokens <= self.body_budget
        ):
            # A title-like line ("2. Pellucid Bio") introduces what follows; it should not end a chunk.
            packs.append(current[:-1])
            return [title]
        packs.append(current)
        return self._overlap(current, following) if mid_group else []

    def _is_title(self, atom: _Atom, before: _Atom) -> bool:
        text = self.text[atom.start : atom.end]
        return (
            self.section.kind == SectionKind.PROSE
            and atom.group != before.group
            and "\n" not in text
            and atom.tokens <= 16
            and not text.rstrip().endswith((".", "!", "?", ";", ",", '"', "'"))
        )

    def _overlap(self, previous: list[_Atom], following: _Atom) -> list[_Atom]:
        """The last sentences of `previous` to repeat before `following`, when cut mid-paragraph."""
        if not self.overlap or not following.sentence:
            return []
        carried: list[_Atom] = []
        for atom in reversed(previous):
            if len(carried) == self.overlap or not atom.sentence or atom.group != following.group:
                break
            carried.insert(0, atom)
        # Overlap is context, not content: never more than half a chunk, and the new sentence must fit.
        while carried and (
            sum(a.tokens for a in carried) > self.body_budget // 2
            or sum(a.tokens for a in carried) + following.tokens > self.body_budget
        ):
            carried.pop(0)
        return carried

    # -- emitting -----------------------------------------------------------------------------------

    def _emit(self, start: int, end: int, atoms: list[_Atom]) -> None:
        """Emit the slice as a chunk, re-counting the final text; split further if the count disagrees."""
        body = self.text[start:end]
        text = f"{self.prefix}\n{body}" if self.prefix else body
        n_tokens = self.tok.count_tokens(text)
        if n_tokens > self.budget:
            if len(atoms) > 1:
                half = len(atoms) // 2
                self._emit(atoms[0].start, atoms[half - 1].end, atoms[:half])
                self._emit(atoms[half].start, atoms[-1].end, atoms[half:])
                return
            smaller = self.tok.count_tokens(body) - (n_tokens - self.budget)
            pieces = self._token_pieces(start, end, smaller) if smaller >= 1 else [(start, end)]
            if len(pieces) > 1:
                for p_start, p_end in pieces:
                    self._emit(p_start, p_end, [self._atom(p_start, p_end, atoms[0].group)])
                return
            text = body  # one token that only fits without the context line
            n_tokens = self.tok.count_tokens(text)
        self.out.append(self._chunk(text, n_tokens, start, end))

    @property
    def _newlines(self) -> list[int]:
        # Where the section's line breaks are: a chunk's line numbers are a bisection, not a count from the
        # top (counting made a 10 MB text file quadratic: minutes to chunk).
        if self._newline_offsets is None:
            self._newline_offsets = [m.start() for m in re.finditer("\n", self.text)]
        return self._newline_offsets

    def _chunk(self, text: str, n_tokens: int, start: int, end: int) -> Chunk:
        doc, section = self.document, self.section
        line_start = line_end = None
        if section.line_start is not None:
            line_start = section.line_start + bisect_left(self._newlines, start)
            line_end = section.line_start + bisect_left(self._newlines, end)
        ordinal = len(self.out)
        return Chunk(
            chunk_id=f"{doc.doc_id}#{ordinal}",
            doc_id=doc.doc_id,
            ordinal=ordinal,
            text=text,
            path=doc.path,
            title=doc.title,
            kind=doc.kind,
            n_tokens=n_tokens,
            language=doc.language,
            heading=section.heading,
            page=section.page,
            line_start=line_start,
            line_end=line_end,
            section_kind=section.kind,
            content_hash=doc.content_hash,
        )

    def _fit_prefix(self, prefix: str) -> str:
        limit = self.budget // _PREFIX_SHARE
        if limit < 1:
            return ""
        if self.tok.count_tokens(prefix) <= limit:
            return prefix
        # Cut where the last of the first `limit` tokens ends that is not inside a word: a trail such as
        # "회의록 > 재무팀장의 별도 승인" loses whole words, never half of one ("별" of "별도"). No trail at all
        # when not even its first word fits: half a word would mislead more than it tells.
        ends = sorted({b for a, b in self.tok.token_offsets(prefix) if b > a})[:limit]
        for end in reversed(ends):
            cut = prefix[:end].rstrip(" >")
            if cut_at(prefix, end) < Cut.IN_WORD and cut and self.tok.count_tokens(cut) <= limit:
                return cut
        return ""
