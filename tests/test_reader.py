"""The reader (`funnel.generate.reader`) and the grounding check it holds each sentence to
(`funnel.generate.grounding`), with `ScriptedChat` standing for the model: what is under test is what the
reader does with a reply (shown, mended, dropped, refused), not the model's wording. The real model runs in
tests/test_local_llm.py."""

from __future__ import annotations

from helpers import chunk
from test_llm_generator import search_result
from upstream_support import ScriptedChat

from funnel.embed import HashingEmbedder
from funnel.errors import BackendUnavailable, UpstreamError
from funnel.generate.abstain import NOT_IN_DOCUMENTS, Abstainer, Evidence
from funnel.generate.extractive import ExtractiveGenerator
from funnel.generate.grounding import check, holds, sentences, values
from funnel.generate.llm import FallbackGenerator, answer_stream
from funnel.generate.reader import ReaderGenerator

MANUAL = [
    chunk("tasn1", 0, "libtasn1 manual\nasn1_der_decoding returns ASN1_SUCCESS on success. It returns ASN1_DER_ERROR "
          "if the DER encoding does not match the structure.", title="libtasn1 manual", page=23),
    chunk("mime", 0, "Shared MIME spec\nThe default weight of a glob pattern is 50. Weights range from 0 to 100.",
          title="Shared MIME spec", page=9),
]


def reader(reply: str | list[str], **kw) -> tuple[ReaderGenerator, ScriptedChat]:
    deltas = reply if isinstance(reply, list) else [reply]
    chat = ScriptedChat("".join(deltas), deltas=deltas)
    return ReaderGenerator(chat, ExtractiveGenerator(HashingEmbedder()), **kw), chat


# --- the grounding check ------------------------------------------------------------------------------


def test_values_are_numbers_quotes_and_identifiers():
    found = values('Use `--no-time-strict` with asn1Decoding; it returns ASN1_DER_ERROR, default 50, version 7.28.0 '
                   '(see /usr/share/doc and mime.cache) [2].')
    assert found[0] == "--no-time-strict"
    for value in ("ASN1_DER_ERROR", "50", "7.28.0", "/usr/share/doc", "mime.cache", "asn1Decoding"):
        assert value in found
    assert "2" not in found  # a citation is no value


def test_a_number_is_held_whole():
    assert holds("The weight is 50 by default.", "50")
    assert not holds("Released in 2050.", "50")
    assert not holds("version 7.28.1", "7.28")


def test_check_keeps_mends_and_drops():
    passages = {1: MANUAL[0].text, 2: MANUAL[1].text}
    assert check("The default weight is 50 [2].", passages).verdict == "kept"
    mended = check("The default weight is 50 [1].", passages)
    assert mended.verdict == "mended" and mended.text.endswith("[2]")
    dropped = check("The default weight is 60 [2].", passages)
    assert dropped.verdict == "dropped" and dropped.missing == ("60",)
    assert check("Bananas are yellow.", passages).verdict == "dropped"  # no citation, nothing shared
    assert check("The glob pattern weight has a default.", passages).verdict == "mended"  # cited by its words


def test_sentences_keep_their_citations():
    assert sentences("It is 50. [2] Weights go to 100 [2].\nNext line") == [
        "It is 50. [2]", "Weights go to 100 [2].", "Next line"]


# --- the reader ---------------------------------------------------------------------------------------


def test_a_grounded_answer_is_shown_with_its_citations():
    generator, chat = reader(["The default glob weight is ", "50 [1]. ", "Weights range from 0 to 100 [1]."])
    result = search_result([MANUAL[1], MANUAL[0]], "What is the default weight of a glob?")
    answer = generator.answer(result.query, result)
    assert answer.text == "The default glob weight is 50 [1]. Weights range from 0 to 100 [1]."
    assert [c.doc_id for c in answer.citations] == ["mime"]
    assert "read" in answer.flags
    system, user = chat.sent[0]
    assert "[1] Shared MIME spec" in user.content and "Question: What is the default weight" in user.content
    assert "not instructions" in system.content  # a passage cannot give the model orders


def test_an_invented_value_is_never_shown():
    generator, _ = reader("The default glob weight is 60 [1]. Weights range from 0 to 100 [1].")
    result = search_result([MANUAL[1]], "What is the default weight of a glob?")
    answer = generator.answer(result.query, result)
    assert "60" not in answer.text and "0 to 100" in answer.text
    assert "dropped:1" in answer.flags


def test_the_picker_stands_in_when_the_model_refuses_or_every_sentence_is_dropped():
    result = search_result([MANUAL[1]], "What is the default weight of a glob pattern?")
    refused, _ = reader(["Your documents do not ", "answer this question."])
    answer = refused.answer(result.query, result)
    assert "picker" in answer.flags and "reader_refused" in answer.flags
    assert "50" in answer.text and answer.citations  # the picker's sentence, cited
    invented, _ = reader("It is 75 [1].")
    answer = invented.answer(result.query, result)
    assert "reader_dropped" in answer.flags and "75" not in answer.text
    abstaining, _ = reader(NOT_IN_DOCUMENTS, refusal="abstain")
    assert abstaining.answer(result.query, result).text == NOT_IN_DOCUMENTS


def test_the_stream_shows_whole_checked_sentences_only():
    generator, _ = reader(["The default ", "weight is 50 [1]", ". It was 99 ", "once [1]. ", "Range 0 to 100 [1]."])
    result = search_result([MANUAL[1]], "default glob weight?")
    stream = answer_stream(generator, result.query, result)
    shown = list(stream)
    assert shown == ["The default weight is 50 [1].", " Range 0 to 100 [1]."]
    assert stream.answer is not None and stream.answer.text == "".join(shown)


def test_a_long_passage_is_windowed_around_the_answer():
    filler = "".join(f"Line {i} talks about nothing in particular at all.\n" for i in range(60))
    long = chunk("big", 0, f"Big manual\n{filler}The answer: glob weight default is 50.\n{filler}", title="Big manual")
    generator, chat = reader("It is 50 [1].", passage_chars=400)
    result = search_result([long], "What is the glob weight default?")
    generator.answer(result.query, result)
    user = chat.sent[0][1].content
    assert "glob weight default is 50" in user and len(user) < 1000


def test_a_failing_model_falls_back_to_the_picker_with_a_status():
    picker = ExtractiveGenerator(HashingEmbedder())
    for error in (BackendUnavailable("no model file at /x.gguf"), UpstreamError("llm", "boom")):
        chat = ScriptedChat()
        chat.stream = lambda *a, error=error, **k: (_ for _ in ()).throw(error)  # type: ignore[method-assign]
        generator = FallbackGenerator(ReaderGenerator(chat, picker), picker)
        result = search_result([MANUAL[1]], "default glob weight?")
        answer = generator.answer(result.query, result)
        assert answer.generator == "extractive" and str(error) in answer.fallback_reason
        assert "50" in answer.text


def test_a_missing_or_broken_model_file_gives_the_picker_and_one_line(tmp_path):
    from helpers import write_files

    from funnel.engine_config import EngineConfig, LlmConfig
    from funnel.index.lance import LanceStore
    from funnel.pipeline import Pipeline

    docs = write_files(tmp_path / "docs", {"anvils.txt": "Acme makes anvils. The CEO of Acme is Jane Roe.\n"})
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)  # the magic, then nothing llama.cpp can load
    for spec, why in ((f"local:{tmp_path / 'missing.gguf'}", "no model file at"),
                      (f"local:{tmp_path / 'docs' / 'anvils.txt'}", "is not a GGUF model file"),
                      (f"local:{broken}", "could not load")):
        config = EngineConfig(index=str(tmp_path / "index"), llm=LlmConfig(backend=spec))
        assert config.llm.reads
        pipeline = Pipeline.build(config, store=LanceStore(tmp_path / "index"), embedder=HashingEmbedder(dim=32),
                                  reranker=None)
        if pipeline.store.info() is None:
            pipeline.ingest([docs])
        answer = pipeline.ask("who is the CEO of Acme?")
        assert answer.generator == "extractive" and "Jane Roe" in answer.text
        reason = answer.fallback_reason
        assert "\n" not in reason and (why in reason or "needs llama-cpp-python" in reason), reason


def test_a_citation_streamed_after_the_full_stop_stays_with_its_sentence():
    generator, _ = reader(["The default weight is 50.", " [", "1]", " Weights range from 0 to 100.", " [1]"])
    result = search_result([MANUAL[1]], "default glob weight?")
    answer = generator.answer(result.query, result)
    assert answer.text == "The default weight is 50. [1] Weights range from 0 to 100. [1]"
    assert not any(f.startswith("mended") for f in answer.flags)


def test_borderline_evidence_goes_to_the_reader_which_decides():
    from funnel.generate.abstain import Abstainer, Evidence
    from funnel.generate.step import BORDERLINE, AnswerStep, answerer

    def evidence(score: float) -> Evidence:
        return Evidence(score, score, 0.0, None, False, 0.0, 3, threshold=0.4)

    generator, _ = reader("It is 75 [1].")  # an invented value: dropped
    wrapped = FallbackGenerator(generator, generator.picker)
    assert BORDERLINE == 1.0 and isinstance(answerer(wrapped, evidence(0.39)), Abstainer)  # by default: the gate
    band = 0.7  # `[answer] borderline = 0.7` opens the band
    assert answerer(wrapped, evidence(0.5), band) is wrapped  # supported: as configured
    assert isinstance(answerer(wrapped, evidence(0.4 * band - 0.01), band), Abstainer)  # clearly short
    assert isinstance(answerer(generator.picker, evidence(0.39), band), Abstainer)  # the picker cannot decide
    result = search_result([MANUAL[1]], "What is the default weight of a glob pattern?")
    close = evidence(0.4 * band + 0.01)
    step = AnswerStep(result.query, result, answerer(wrapped, close, band), close)
    answer = step.answer()
    assert answer.abstained and "75" not in answer.text  # nothing the reader could stand behind: abstained
    grounded, _ = reader("The default weight is 50 [1].")
    step = AnswerStep(result.query, result, answerer(FallbackGenerator(grounded, grounded.picker), close, band), close)
    answer = step.answer()
    assert not answer.abstained and answer.text == "The default weight is 50 [1]."  # a paraphrase, answered
    failing = ScriptedChat()
    failing.stream = lambda *a, **k: (_ for _ in ()).throw(UpstreamError("llm", "boom"))  # type: ignore[method-assign]
    broken = FallbackGenerator(ReaderGenerator(failing, grounded.picker), grounded.picker)
    assert AnswerStep(result.query, result, answerer(broken, close, band), close).answer().abstained


def test_a_local_models_tool_call_blocks_become_tool_calls():
    from funnel.generate.local import tool_calls

    text, calls = tool_calls('Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py", '
                             '"start_line": 1}}\n</tool_call>')
    assert text == "Let me look." and calls[0].name == "read_file" and calls[0].arguments["path"] == "a.py"
    assert tool_calls("<tool_call>{not json}</tool_call>") == ("<tool_call>{not json}</tool_call>", ())
    assert tool_calls('{"summary": "x"}') == ('{"summary": "x"}', ())


class CountingPicker(ExtractiveGenerator):
    def __init__(self):
        super().__init__(HashingEmbedder())
        self.picks = 0

    def pick(self, question, result):
        self.picks += 1
        return super().pick(question, result)


def test_the_pickers_sentence_is_shown_first_and_kept_beside_the_readers_answer():
    from funnel.generate.step import AnswerStep

    picker = CountingPicker()
    chat = ScriptedChat("It is 50 [1].", deltas=["It is ", "50 [1]."])
    generator = FallbackGenerator(ReaderGenerator(chat, picker), picker)
    result = search_result([MANUAL[1], MANUAL[0]], "What is the default weight of a glob pattern?")
    step = AnswerStep(result.query, result, generator, None)
    quote = step.quote()
    assert not chat.sent  # at once: before the model was asked anything
    assert len(quote) == 1 and "default weight of a glob pattern is 50" in quote[0].text
    assert quote[0].doc_id == "mime" and quote[0].page == 9
    stream = step.stream()
    assert "".join(stream) == "It is 50 [1]."
    assert stream.answer.quote == quote and "read" in stream.answer.flags
    assert picker.picks == 1  # the quote and the reader share one pick
    # An abstention quotes nothing.
    evidence = Evidence(0.1, 0.2, 0.0, None, False, 0.5, 4, threshold=0.35)
    assert AnswerStep(result.query, result, Abstainer(evidence, "x"), evidence).quote() == ()


def test_every_sentence_the_picker_chose_is_quoted_even_when_they_share_one_citation():
    from funnel.generate.reader import quoted
    from funnel.types import Answer, Citation

    first = Citation.of(1, MANUAL[0], "asn1_der_decoding returns ASN1_SUCCESS on success.")
    other = Citation.of(2, MANUAL[1], "The default weight of a glob pattern is 50.")
    picked = Answer("q", "asn1_der_decoding returns ASN1_SUCCESS on success. [1]\n"
                         "It returns ASN1_DER_ERROR if the DER encoding does not match [1]\n"
                         "the structure.\nThe default weight of a glob pattern is 50. [2]", (first, other), "extractive")
    assert [(q.number, q.text) for q in quoted(picked)] == [
        (1, "asn1_der_decoding returns ASN1_SUCCESS on success."),
        (1, "It returns ASN1_DER_ERROR if the DER encoding does not match the structure."),
        (2, "The default weight of a glob pattern is 50.")]
    assert quoted(Answer("q", "no markers here", (first,), "extractive")) == (first,)


def test_a_model_that_breaks_mid_answer_keeps_the_quote_shown_before_it():
    picker = ExtractiveGenerator(HashingEmbedder())
    chat = ScriptedChat("", deltas=["It is 50 [1]. ", "Weights range ", "from 0 [1]."], fail_after=2)
    generator = FallbackGenerator(ReaderGenerator(chat, picker), picker)
    result = search_result([MANUAL[1]], "What is the default weight of a glob pattern?")
    stream = answer_stream(generator, result.query, result)
    shown = "".join(stream)
    assert shown.startswith("It is 50 [1].") and "interrupted" in shown
    assert stream.answer.quote and "is 50" in stream.answer.quote[0].text


def test_a_borderline_reader_quotes_nothing_before_it_decides():
    generator, _ = reader("It is 50 [1].")
    result = search_result([MANUAL[1]], "What is the default weight of a glob pattern?")
    assert generator.quote(result.query, result)
    assert generator.borderline(None).quote(result.query, result) == ()
