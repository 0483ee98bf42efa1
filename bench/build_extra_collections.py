"""Build small classic IR test collections (CACM, LISA, TIME, ADI) in BEIR layout.

Output, one folder per collection under ``bench/data/NAME/`` (NAME = cacm, lisa, time, adi):

* ``corpus.jsonl``   -- ``{"_id", "title", "text"}`` one document per line, source order
* ``queries.jsonl``  -- ``{"_id", "text"}`` only queries that have at least one judgment
* ``qrels/test.tsv`` -- header ``query-id\\tcorpus-id\\tscore``; all judgments are binary (score 1)

``SOURCE.md`` in each folder documents provenance, counts and the derivation in prose; this script is
the executable form of that derivation.  It uses only the Python standard library.

Raw files
---------
These are the SMART/Glasgow distributions (ir.dcs.gla.ac.uk/resources/test_collections), taken from
public GitHub mirrors.  Put them in ``RAW/cacm``, ``RAW/lisa``, ``RAW/time``, ``RAW/adi`` and pass
``--raw RAW``.  Every raw file is checked against the SHA-256 in ``RAW_SHA256`` below before parsing.

* cacm -- GitHub ``Hamza5/RI-TP`` commit b362e149af06f9ed6278d71d36752d66e33b2a9d (blobs unchanged since
  4c078a0a6e20743a60f4c71ad679ec1c53a3473c), paths ``cacm/cacm.all``, ``cacm/query.text``,
  ``cacm/qrels.text``; e.g. ``git --git-dir=MIRROR show b362e149:cacm/cacm.all > RAW/cacm/cacm.all``.
  (cacm.all is 2,187,734 bytes, exactly the size in the collection's own README.  The copy in
  ``charlesdlrsa/moteur_recherche_fri`` was rejected: it has a line break inserted in ``.I 2856``.)

* lisa -- GitHub ``ericlabouve/Term-Proximity-Research`` commit c5892ffbde4402395655091c6bb14bfdac9d43d0
  (the commit that *added* the unmodified Glasgow files; later commits of that repo rewrote them),
  paths ``datasets/lisa/{LISA0.001 ... LISA5.850, LISA.QUE, LISARJ.NUM}``.
* time -- same repo, commit 012f67e326cf88cd86e0eec8b3bc822223309d98 (files unchanged since c5892ff),
  paths ``datasets/time/{TIME.ALL, TIME.QUE, TIME.REL}``.
* adi  -- same repo, commit 012f67e326cf88cd86e0eec8b3bc822223309d98 (unchanged since d2af836),
  paths ``datasets/adi/{ADI.ALL, ADI.QRY, ADI.REL}``.

That second repository also contains other collections; only the paths listed above were read.

Usage::

    python bench/build_extra_collections.py --raw /path/to/raw [--out bench/data] [--only cacm,time]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import OrderedDict
from pathlib import Path

RAW_SHA256 = {
    "cacm/cacm.all": "34bdd3eb27a92e5f8068a785b53ef40b9dc0b800dbafc5bac79a80dd999cdc17",
    "cacm/query.text": "ca004f06b57cb8a298c73bf55793174e50ff32fc83c5bb5f10ed2ed559f621e6",
    "cacm/qrels.text": "da4202b0c70cad7d91c9a028eaf8cbd0a4ca981ebdc3955eb75ba7b6de6f185c",
    "lisa/LISA.QUE": "0807676e427fd000143f1d87f2e47868273d92f00d284fdb854bda84c4eb0710",
    "lisa/LISARJ.NUM": "ad3d19b67000c75871cd372cd80a421ba770cf1e49f6d0be218ff7399ce4a03b",
    "lisa/LISA0.001": "f65d26f88eaebdc9b93f71c593cb12cfd56aeb8af96a35e6ae84f1d1cc921d05",
    "lisa/LISA0.501": "bd05125114beadc1855746a155e5c0acc4931b03335e1ced5ec92510dd3b89be",
    "lisa/LISA1.001": "5b7c505748017871a9ce9df0c08af11620f00ab4c4a4275cf6b73fa686c68060",
    "lisa/LISA1.501": "6c5c2afeee5914d93aee602dfcb29bdc9128f881006b8e2f27f5fc49d58e917a",
    "lisa/LISA2.001": "368017d7dcb1f89d2c687d899aca44bc142b73c5a90e4836dc4a777753a2daac",
    "lisa/LISA2.501": "b5261978dc1cacfb5135241bc23d22f8d4cdd79d4d05227b6184001bfe523e5f",
    "lisa/LISA3.001": "1a72b02bdebb51d40cc99b94d1a6d0a19d6f5622b5ea11530762f1e7a7579275",
    "lisa/LISA3.501": "ba1f6d9afd116da5f0e648de8660dae3fddd1e992896012eb90830025fdab147",
    "lisa/LISA4.001": "4286019ff5892883b61c6ca90feaac365504a38856ca8c74da8f3d0aee56cd57",
    "lisa/LISA4.501": "8920e83f5fea55f9303181627cf6a70e1bfee68471a8181ba5d2e1c493eee91c",
    "lisa/LISA5.001": "d3200853b34587f14988fbfe716e90317919c0c5fba5289a72f53956c9b3ded9",
    "lisa/LISA5.501": "2c93176398637fdf08b9ce0ebbf40522df8e3f6564c4bbee2c3949f5cc1a1223",
    "lisa/LISA5.627": "c763b4a71b070de5d91e2232b752a4c6a89bf94286e8fd440cdf10bea549cf8b",
    "lisa/LISA5.850": "67c9db89f87255bf1e741ea4d00252fe2ce1acc00d24bff1bd7a6087fee8589b",
    "time/TIME.ALL": "b8ae908cff6f1d5d1ed77958accc2b890c6a94ab2d15748af80c2b2ac7466ab6",
    "time/TIME.QUE": "4c6d7ce94f51fdff805f8fd0773bb98cf3e7868521bab544a047a5a1935dbda6",
    "time/TIME.REL": "e7f3c69bde95fe05e757db6c60f262608028945cd0f9c1fcba4cb116abcc1539",
    "adi/ADI.ALL": "7154f3d91194ca290e306da8803b24eef311064479ec33ab88dac7a9ecd4a3fa",
    "adi/ADI.QRY": "845e2691fe54018e1ab3b8251c3b0b07e87aa5229de7b91f0c2d426ccdf92e61",
    "adi/ADI.REL": "8c75a2e1f0f02011ba1e6b25893d70ddd2f5602fc9a694a2ab6781e0ec66d745",
}

LISA_DOC_FILES = [
    "LISA0.001", "LISA0.501", "LISA1.001", "LISA1.501", "LISA2.001", "LISA2.501", "LISA3.001",
    "LISA3.501", "LISA4.001", "LISA4.501", "LISA5.001", "LISA5.501", "LISA5.627", "LISA5.850",
]

# TIME.REL numbers documents by their ordinal position in a 425-document file; the distributed
# TIME.ALL has 423 documents: the two after the 370th (*TEXT 499 and *TEXT 500, by the gap in the
# *TEXT numbering 498 -> 501) are missing.  Judged ordinals are never in 371..377, so the mapping
# below is unambiguous; see SOURCE.md for the evidence.
TIME_LOST_AFTER_ORDINAL = 370
TIME_LOST_COUNT = 2


# ----------------------------------------------------------------------------------------------
# helpers


def read_text(path: Path) -> str:
    """Read an ASCII raw file, normalising CRLF/CR line ends to LF."""
    data = path.read_bytes().decode("ascii")
    return data.replace("\r\n", "\n").replace("\r", "\n")


def norm(s: str) -> str:
    """Collapse every whitespace run (incl. newlines) to one space and strip."""
    return " ".join(s.split())


def check_raw(raw: Path, names: list[str]) -> None:
    for rel, want in RAW_SHA256.items():
        if rel.split("/")[0] not in names:
            continue
        p = raw / rel
        if not p.is_file():
            sys.exit(f"missing raw file: {p}")
        got = hashlib.sha256(p.read_bytes()).hexdigest()
        if got != want:
            sys.exit(f"sha256 mismatch for {p}: {got} != {want}")


def smart_records(text: str) -> list[tuple[str, dict[str, list[str]]]]:
    """Split a SMART-format file (``.I id`` then ``.X`` field markers) into (id, {field: [chunks]})."""
    recs: list[tuple[str, dict[str, list[str]]]] = []
    cur_id = None
    fields: dict[str, list[str]] = {}
    field = None
    buf: list[str] = []

    def flush_field():
        if cur_id is not None and field is not None:
            fields.setdefault(field, []).append("\n".join(buf))

    for line in text.split("\n"):
        m = re.match(r"^\.I\s+(\d+)\s*$", line)
        if m:
            flush_field()
            if cur_id is not None:
                recs.append((cur_id, fields))
            cur_id, fields, field, buf = str(int(m.group(1))), {}, None, []
            continue
        m = re.match(r"^\.([A-Z])\s*$", line)
        if m and cur_id is not None:
            flush_field()
            field, buf = m.group(1), []
            continue
        if field is not None:
            buf.append(line)
    flush_field()
    if cur_id is not None:
        recs.append((cur_id, fields))
    return recs


def write_beir(out: Path, corpus, queries, qrels) -> dict:
    """Write corpus/queries/qrels; keep only judged queries; verify ids line up; return counts."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    doc_ids = [d["_id"] for d in corpus]
    assert len(doc_ids) == len(set(doc_ids)), "duplicate corpus ids"
    doc_set = set(doc_ids)
    qid_set = {q["_id"] for q in queries}
    assert len(qid_set) == len(queries), "duplicate query ids"
    # dedupe (qid, did) pairs, keep first-seen order
    pairs = list(OrderedDict.fromkeys(qrels))
    for qid, did in pairs:
        assert did in doc_set, f"qrels doc {did} not in corpus"
        assert qid in qid_set, f"qrels query {qid} not in queries"
    judged = {q for q, _ in pairs}
    queries = [q for q in queries if q["_id"] in judged]
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in corpus:
            assert d["text"], f"empty text for doc {d['_id']}"
            f.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"]}) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in queries:
            assert q["text"], f"empty query {q['_id']}"
            f.write(json.dumps({"_id": q["_id"], "text": q["text"]}) + "\n")
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, did in pairs:
            f.write(f"{qid}\t{did}\t1\n")
    return {"docs": len(corpus), "queries": len(queries), "qrels": len(pairs)}


# ----------------------------------------------------------------------------------------------
# collections


def build_cacm(raw: Path):
    d = raw / "cacm"
    corpus = []
    n_notext = 0
    for did, f in smart_records(read_text(d / "cacm.all")):
        title = norm(" ".join(f.get("T", [])))
        abstract = norm(" ".join(f.get("W", [])))
        if abstract == "None":  # 4 docs (3051, 3061-3063) carry the literal placeholder "None" as .W
            abstract = ""
        if not abstract:
            n_notext += 1
        corpus.append({"_id": did, "title": title, "text": abstract or title})
    queries = [{"_id": qid, "text": norm(" ".join(f.get("W", [])))}
               for qid, f in smart_records(read_text(d / "query.text"))]
    qrels = pair_qrels(d / "qrels.text")
    return corpus, queries, qrels, {"docs_without_abstract": n_notext,
                                    "queries_in_file": len(queries)}


def pair_qrels(path: Path) -> list[tuple[str, str]]:
    """SMART relevance files whose lines start "QUERY DOC ..." (CACM's qrels.text, ADI.REL)."""
    pairs = []
    for line in read_text(path).split("\n"):
        p = line.split()
        if p:
            pairs.append((str(int(p[0])), str(int(p[1]))))
    return pairs


def build_adi(raw: Path):
    d = raw / "adi"
    corpus = []
    for did, f in smart_records(read_text(d / "ADI.ALL")):
        # doc 67 has its .T field twice (same title); keep distinct title chunks in order
        titles = list(OrderedDict.fromkeys(norm(t) for t in f.get("T", []) if norm(t)))
        title = " ".join(titles)
        text = norm(" ".join(f.get("W", [])))
        corpus.append({"_id": did, "title": title, "text": text or title})
    queries = [{"_id": qid, "text": norm(" ".join(f.get("W", [])))}
               for qid, f in smart_records(read_text(d / "ADI.QRY"))]
    qrels = pair_qrels(d / "ADI.REL")
    return corpus, queries, qrels, {"queries_in_file": len(queries)}


def build_lisa(raw: Path):
    d = raw / "lisa"
    text = "".join(read_text(d / name) for name in LISA_DOC_FILES)
    chunks = re.split(r"^\*{44}\s*$", text, flags=re.MULTILINE)
    corpus, seen, stats = [], {}, {"headerless_fragments": 0, "duplicate_records": 0,
                                   "duplicate_records_differing": 0}
    for chunk in chunks:
        if not chunk.strip():
            continue
        m = re.match(r"\s*Document\s+(\d+)[ \t]*\n", chunk)
        if not m:  # a stray text fragment without a "Document N" header (LISA1.501 damage)
            stats["headerless_fragments"] += 1
            continue
        did = str(int(m.group(1)))
        body = chunk[m.end():].split("\n")
        # title = lines up to the first blank (or whitespace-only) line; abstract = the rest
        title_lines, rest = [], []
        for i, line in enumerate(body):
            if not line.strip():
                rest = body[i + 1:]
                break
            title_lines.append(line)
        title, abstract = norm(" ".join(title_lines)), norm(" ".join(rest))
        doc = {"_id": did, "title": title, "text": abstract or title}
        if did in seen:  # duplicated records (LISA1.501 damage): keep the first occurrence
            stats["duplicate_records"] += 1
            if seen[did] != doc:
                stats["duplicate_records_differing"] += 1
            continue
        seen[did] = doc
        corpus.append(doc)
    q = read_text(d / "LISA.QUE")
    queries = [{"_id": str(int(m.group(1))), "text": norm(m.group(2))}
               for m in re.finditer(r"^\s*(\d+)\s*\n(.*?)#", q, flags=re.MULTILINE | re.DOTALL)]
    nums = [int(x) for x in read_text(d / "LISARJ.NUM").split()]
    qrels, i = [], 0
    while i < len(nums):  # records: query-id, n, then n document ids
        qid, n = nums[i], nums[i + 1]
        qrels += [(str(qid), str(did)) for did in nums[i + 2:i + 2 + n]]
        i += 2 + n
    stats["missing_doc_ids"] = sorted(set(range(1, 6005)) - {int(x["_id"]) for x in corpus})
    stats["queries_in_file"] = len(queries)
    return corpus, queries, qrels, stats


def build_time(raw: Path):
    d = raw / "time"
    text = read_text(d / "TIME.ALL")
    text = re.sub(r"^\*STOP\s*$", "", text, flags=re.MULTILINE)
    parts = re.split(r"^\*TEXT\s+", text, flags=re.MULTILINE)[1:]
    corpus = []
    for p in parts:
        header, _, body = p.partition("\n")
        corpus.append({"_id": str(int(header.split()[0])), "title": "", "text": norm(body)})
    q = read_text(d / "TIME.QUE")
    queries = [{"_id": str(int(m.group(1))), "text": norm(m.group(2))}
               for m in re.finditer(r"^\*FIND\s+(\d+)\s*\n(.*?)(?=^\*FIND|^\*STOP|\Z)", q,
                                    flags=re.MULTILINE | re.DOTALL)]

    def ordinal_to_id(r: int) -> str:
        if r <= TIME_LOST_AFTER_ORDINAL:
            idx = r
        elif r > TIME_LOST_AFTER_ORDINAL + TIME_LOST_COUNT:
            idx = r - TIME_LOST_COUNT
        else:
            raise ValueError(f"TIME.REL refers to lost document ordinal {r}")
        return corpus[idx - 1]["_id"]

    qrels = []
    for line in read_text(d / "TIME.REL").split("\n"):
        p = line.split()
        if p:
            qrels += [(str(int(p[0])), ordinal_to_id(int(r))) for r in p[1:]]
    return corpus, queries, qrels, {"queries_in_file": len(queries)}


BUILDERS = {"cacm": build_cacm, "lisa": build_lisa, "time": build_time, "adi": build_adi}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True, type=Path, help="folder with cacm/ lisa/ time/ adi/ raw files")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    ap.add_argument("--only", default=",".join(BUILDERS), help="comma list of collections")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    for n in names:
        if n not in BUILDERS:
            sys.exit(f"unknown collection {n}")
    check_raw(args.raw, names)
    for n in names:
        corpus, queries, qrels, extra = BUILDERS[n](args.raw)
        counts = write_beir(args.out / n, corpus, queries, qrels)
        qrel_q = len({q for q, _ in qrels})
        print(f"{n}: docs={counts['docs']} queries={counts['queries']} (judged; "
              f"{extra.get('queries_in_file')} in file) qrels={counts['qrels']} "
              f"rel/query={counts['qrels'] / max(qrel_q, 1):.2f} "
              + " ".join(f"{k}={v}" for k, v in extra.items() if k != "queries_in_file"))


if __name__ == "__main__":
    main()
