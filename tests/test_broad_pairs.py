"""tools/broad_pairs.py: judged training collections from Debian's descriptions, SQuAD-format files and Stack
Exchange posts. A family of packages sharing one description must give one document (else its copies would be
mined as negatives of each other), a SQuAD file cut short must be read up to its last whole paragraph, and a
question must keep one answer (else its others would be mined as its negatives)."""

from __future__ import annotations

import importlib.util
import json
import lzma
from html import escape
from pathlib import Path

from funnel.eval.beir import load_beir

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("broad_pairs", ROOT / "tools" / "broad_pairs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LONG = ("A real-time strategy game of ancient warfare, historically based, that lets players relive or rewrite "
        "the history of Western civilizations, with a custom-built 3D engine.")


def _translations(path: Path) -> Path:
    blocks = [
        f"Package: 0ad\nDescription-md5: 1\nDescription-en: Real-time strategy game of ancient warfare\n {LONG}\n",
        f"Package: 0ad-data\nDescription-md5: 2\nDescription-en: Real-time strategy game (data files)\n {LONG}\n"
        " .\n This package contains the data files.\n",
        "Package: abyss\nDescription-md5: 3\nDescription-en: de novo, parallel, sequence assembler for short reads\n"
        " ABySS is a de novo, parallel, paired-end sequence assembler that is designed for short reads.\n"
        " .\n The single-processor version is useful for assembling genomes up to 100 Mbases in size.\n",
        "Package: tiny\nDescription-md5: 4\nDescription-en: too short to judge\n Tiny.\n",
    ]
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(blocks))
    return path


def test_debian_keeps_one_package_per_description_and_judges_synopsis_to_description(tmp_path):
    tool = _tool()
    out = tmp_path / "debian"
    assert tool.main(["debian", "--translations", str(_translations(tmp_path / "T.xz")), "--out", str(out)]) == 0
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert sorted(r["_id"] for r in corpus) == ["0ad", "abyss"]  # 0ad-data repeats 0ad's; tiny is too short
    abyss = next(r for r in corpus if r["_id"] == "abyss")
    assert abyss["title"] == "" and abyss["text"].count("\n\n") == 1  # its two paragraphs, no " ." line
    evalset = load_beir(out, "train", "record")
    assert evalset.queries["q-abyss"] == "de novo, parallel, sequence assembler for short reads"
    assert evalset.qrels["q-abyss"] == {"abyss": 1}


def test_squad_file_cut_short_is_read_to_its_last_whole_paragraph(tmp_path):
    tool = _tool()
    data = {"data": [{"title": "Notre_Dame", "paragraphs": [
        {"context": "The Grotto is a Marian place of prayer.", "qas": [
            {"question": "What is the Grotto at Notre Dame?", "id": "a"}]},
        {"context": "The Observer is the daily student paper.", "qas": [
            {"question": "What is the daily student paper called?", "id": "b"},
            {"question": "Unanswerable here?", "id": "c", "is_impossible": True}]},
        {"context": "This paragraph is cut in the middle of its questions.", "qas": [
            {"question": "Is this ever read?", "id": "d"}]},
    ]}]}
    text = json.dumps(data)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index("Is this ever")])
    out = tmp_path / "squad"
    assert tool.main(["squad", "--json", str(cut), "--out", str(out)]) == 0
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [(r["_id"], r["title"]) for r in corpus] == [("0-0", "Notre Dame"), ("0-1", "Notre Dame")]
    evalset = load_beir(out, "train", "record")
    assert sorted(evalset.queries.values()) == ["What is the Grotto at Notre Dame?",
                                                "What is the daily student paper called?"]
    assert {d for judged in evalset.qrels.values() for d in judged} == {"0-0", "0-1"}


def test_stackexchange_judges_a_title_to_its_accepted_answer_only(tmp_path):
    tool = _tool()
    long = "Grind it just before brewing, " * 4
    asked = "I buy a kilo at a time and it goes stale before I can drink it all, what can I do?"
    rows = [
        ("1", "1", "", "5", "How should I store whole bean coffee?", f"<p>{asked}</p>", "3"),
        ("2", "2", "1", "9", "", f"<p>Freeze it. {long}</p>", ""),
        ("3", "2", "1", "4", "", f"<p>In a cool, <b>dark</b> place.</p><ul><li>{long}</li></ul>", ""),
        ("4", "1", "", "1", "Is decaf coffee still coffee at all?", "", ""),
        ("5", "2", "4", "0", "", f"<p>Nobody voted for this answer, {long}</p>", ""),
    ]
    posts = tmp_path / "Posts.xml"
    posts.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n' + "".join(
            f'<row Id="{i}" PostTypeId="{kind}" ParentId="{parent}" Score="{score}" Title="{escape(title)}" '
            f'Body="{escape(body)}" AcceptedAnswerId="{accepted}" />\n'
            for i, kind, parent, score, title, body, accepted in rows
        ) + "</posts>\n", encoding="utf-8")
    out = tmp_path / "se"
    assert tool.main(["stackexchange", "--posts", str(posts), "--out", str(out)]) == 0
    corpus = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    # The accepted answer, not the better-scored one; question 4's only answer has no positive score.
    assert [r["_id"] for r in corpus] == ["0-3"]
    assert corpus[0]["text"].startswith("In a cool, dark place.\nGrind it")
    evalset = load_beir(out, "train", "record")
    assert evalset.queries == {  # the title, and the title with the question's body: a long query
        "q-0-3": "How should I store whole bean coffee?",
        "q-0-3-post": f"How should I store whole bean coffee? {asked}",
    }
    assert evalset.qrels == {"q-0-3": {"0-3": 1}, "q-0-3-post": {"0-3": 1}}
