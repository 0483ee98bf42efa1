"""The Store contract. Every backend's test class inherits StoreContract and provides `store`."""

from dataclasses import replace

import numpy as np
import pytest

from funnel.embed import HashingEmbedder
from funnel.errors import ConfigError, StoreError
from funnel.index.base import Filter
from funnel.analyze import lexical_text
from funnel.index.lance import LanceStore

from helpers import chunk

EMB = HashingEmbedder(dim=32)


def _write(store, chunks, delete=()):
    with store.transaction(EMB.name, EMB.dim) as tx:
        if delete:
            tx.delete_documents(set(delete))
        tx.add(chunks, EMB.embed([c.text for c in chunks]))


CORPUS = [
    chunk("a", 0, "the UserService raised a NullPointerException", kind="code", path="src/a.py"),
    chunk("a", 1, "cats sleep on warm keyboards", kind="code", path="src/a.py"),
    chunk("b", 0, "dogs bark at the postman every morning", path="docs/b.md"),
    chunk("c", 0, "Company: Zentara Robotics | CEO: Iris Kallas | Employees: 287", path="docs/c.pdf", page=2),
]


class StoreContract:
    @pytest.fixture
    def store(self, tmp_path):
        raise NotImplementedError

    def test_empty_store_has_no_info_and_finds_nothing(self, store):
        assert store.info() is None
        assert store.search_lexical("cats", 5) == []
        assert store.document_hashes() == {}

    def test_roundtrip_keeps_every_field(self, store):
        _write(store, CORPUS)
        got = store.get_chunks("c")
        assert got == [CORPUS[3]]
        info = store.info()
        assert (info.chunks, info.documents, info.embedder, info.dim) == (4, 3, EMB.name, EMB.dim)

    def test_lexical_and_dense_search(self, store):
        _write(store, CORPUS)
        assert store.search_lexical("Who is the CEO of Zentara?", 2)[0].chunk.chunk_id == "c#0"
        dense = store.search_dense(EMB.embed(["dogs bark at the postman"])[0], 4)
        assert dense[0].chunk.chunk_id == "b#0"
        assert dense[0].score == pytest.approx(max(s.score for s in dense))

    def test_camel_case_identifiers_match_their_parts(self, store):
        _write(store, CORPUS)
        assert store.search_lexical("user service", 1)[0].chunk.chunk_id == "a#0"

    @pytest.mark.parametrize("analyzer", ["cjk", "korean"])
    def test_korean_nouns_match_whatever_particle_is_attached(self, store, analyzer):
        korean = [
            chunk("k1", 0, "서울에서 열린 회의는 세 시에 끝났다.", path="k1.md"),
            chunk("k2", 0, "부산과 대구는 남쪽에 있는 도시다.", path="k2.md"),
            chunk("e1", 0, "The meeting in Seoul ended at three.", path="e1.md"),
        ]
        with store.transaction(EMB.name, EMB.dim, analyzer) as tx:
            tx.add(korean, EMB.embed([c.text for c in korean]))
        assert store.info().analyzer == analyzer
        assert store.search_lexical("서울의 회의", 3)[0].chunk.chunk_id == "k1#0"
        assert store.search_lexical("대구가 어디에 있나요", 3)[0].chunk.chunk_id == "k2#0"
        # a mixed index: the English question finds the English passage
        assert store.search_lexical("When did the meeting end?", 3)[0].chunk.chunk_id == "e1#0"

    def test_an_index_keeps_its_analyzer_and_refuses_another_in_one_line(self, store):
        with store.transaction(EMB.name, EMB.dim, "cjk") as tx:
            tx.add(CORPUS[:1], EMB.embed([CORPUS[0].text]))
        with pytest.raises(ConfigError, match="analyzed with cjk, not english") as e:
            with store.transaction(EMB.name, EMB.dim, "english"):
                pass
        assert "\n" not in str(e.value)
        _write(store, CORPUS[1:2])  # auto: the index's own
        assert (store.info().analyzer, store.info().chunks) == ("cjk", 2)

    def test_the_english_analyzer_matches_korean_words_whole(self, store):
        doc = [chunk("k", 0, "서울에서 열린 회의", path="k.md")]
        with store.transaction(EMB.name, EMB.dim, "english") as tx:
            tx.add(doc, EMB.embed([doc[0].text]))
        assert store.search_lexical("서울", 1) == []
        assert store.search_lexical("서울에서", 1)[0].chunk.chunk_id == "k#0"

    def test_query_syntax_is_plain_text(self, store):
        _write(store, CORPUS)
        for query in ['"unbalanced', "CEO: AND OR (", "*", "dogs -bark +x", "NOT"]:
            store.search_lexical(query, 3)  # must not raise

    def test_filters(self, store):
        _write(store, CORPUS)
        hits = store.search_lexical("cats dogs UserService", 10, Filter(kinds=("code",)))
        assert {h.chunk.doc_id for h in hits} == {"a"}
        hits = store.search_dense(EMB.embed(["dogs"])[0], 10, Filter(path_prefix="docs/"))
        assert {h.chunk.doc_id for h in hits} == {"b", "c"}
        hits = store.search_lexical("dogs CEO", 10, Filter(doc_ids=("c",)))
        assert [h.chunk.doc_id for h in hits] == ["c"]

    def test_outline_lists_every_chunk_without_text(self, store):
        assert store.outline() == []
        _write(store, CORPUS)
        entries = store.outline()
        assert [e.chunk_id for e in entries] == ["b#0", "c#0", "a#0", "a#1"]  # by path, then ordinal
        assert {e.path for e in store.outline(Filter(kinds=("code",)))} == {"src/a.py"}
        assert (entries[1].path, entries[1].kind, entries[1].heading) == ("docs/c.pdf", "text", None)

    def test_delete_by_document(self, store):
        _write(store, CORPUS)
        _write(store, [], delete={"a"})
        assert set(store.document_hashes()) == {"b", "c"}
        assert store.search_lexical("UserService", 5) == []

    def test_failed_transaction_leaves_previous_index(self, store):
        _write(store, CORPUS)
        before = store.info()
        with pytest.raises(RuntimeError):
            with store.transaction(EMB.name, EMB.dim) as tx:
                tx.delete_documents({"a", "b", "c"})
                raise RuntimeError("crash mid-ingest")
        # Same content; the version number may move on (Lance rolls back by committing a copy of it).
        assert replace(store.info(), version=0) == replace(before, version=0)
        assert store.search_lexical("dogs", 1)[0].chunk.doc_id == "b"
        _write(store, [chunk("d", 0, "a fresh document")])  # the next writer starts from the old version
        assert set(store.document_hashes()) == {"a", "b", "c", "d"}

    def test_other_embedder_is_refused(self, store):
        _write(store, CORPUS)
        with pytest.raises(ConfigError, match="embedder"):
            with store.transaction("other", 7):
                pass


    def test_vectors_come_back_in_the_asked_order(self, store):
        _write(store, CORPUS)
        ids = ["c#0", "a#0", "b#0"]
        got = store.vectors(ids)
        expected = EMB.embed([next(c.text for c in CORPUS if c.chunk_id == i) for i in ids])
        assert got.shape == (3, EMB.dim) and np.allclose(got, expected, atol=1e-6)
        with pytest.raises(StoreError, match="no chunk 'zz#0'"):
            store.vectors(["a#0", "zz#0"])

    def test_calibration_is_stored_with_the_index(self, store):
        assert store.read_calibration() is None
        with pytest.raises(StoreError, match="ingest before calibrating"):
            store.write_calibration({"format": 1})
        _write(store, CORPUS)
        store.write_calibration({"format": 1, "policy": "rrf", "weight": 0.5})
        store.write_calibration({"format": 1, "policy": "none", "weight": 0.0})  # replaced, not appended
        assert store.read_calibration() == {"format": 1, "policy": "none", "weight": 0.0}
        _write(store, CORPUS[:1], delete={"b"})  # an ingest keeps it (`funnel ingest` recalibrates)
        assert store.read_calibration()["policy"] == "none"


class TestLanceStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LanceStore(tmp_path / "index")

    def test_reader_in_another_instance_sees_commits(self, tmp_path):
        writer, reader = LanceStore(tmp_path / "i"), LanceStore(tmp_path / "i")
        _write(writer, CORPUS[:1])
        assert reader.info().chunks == 1
        _write(writer, CORPUS[1:])
        assert reader.info().chunks == 4

    def test_second_writer_gets_a_clear_error(self, tmp_path):
        store = LanceStore(tmp_path / "i")
        with store.transaction(EMB.name, EMB.dim):
            with pytest.raises(StoreError, match="another ingest"):
                with LanceStore(tmp_path / "i").transaction(EMB.name, EMB.dim):
                    pass

    def test_wrong_vector_shape_is_refused(self, tmp_path):
        store = LanceStore(tmp_path / "i")
        with pytest.raises(StoreError):
            with store.transaction(EMB.name, EMB.dim) as tx:
                tx.add(CORPUS, np.zeros((2, EMB.dim), dtype=np.float32))
        assert store.info() is None


def test_lexical_text_adds_camel_case_parts():
    assert lexical_text("raise in UserService.getUser") == "raise in UserService.getUser\nUser Service get User"
    assert lexical_text("mRNA and IL-6 stay as they are") == "mRNA and IL-6 stay as they are"


def test_old_versions_are_pruned_but_the_previous_commit_survives(tmp_path, monkeypatch):
    import time
    from datetime import timedelta

    import lancedb

    from funnel.index import lance

    monkeypatch.setattr(lance, "PRUNE_MARGIN", timedelta(seconds=0.5))
    store = LanceStore(tmp_path / "i")
    for i in range(2):
        _write(store, [chunk(f"doc{i}", 0, f"text number {i}")])
    time.sleep(1.2)
    _write(store, [chunk("doc2", 0, "text number 2")])
    previous = store.info().version
    reader = LanceStore(tmp_path / "i")
    assert reader.info().version == previous  # a reader pinned to the previous commit...
    _write(store, [chunk("doc9", 0, "the last one")])
    versions = [v["version"] for v in lancedb.connect(tmp_path / "i").open_table("chunks").list_versions()]
    assert previous in versions  # ...can still finish its queries
    assert min(versions) > 2  # the versions of the first commits are gone
    assert reader.search_lexical("last one", 1)[0].chunk.doc_id == "doc9"


def _lance_data_files(index) -> set[str]:
    table = index / "chunks.lance"
    return {str(p.relative_to(table)) for sub in ("data", "_deletions", "_indices") for p in (table / sub).rglob("*")}


@pytest.mark.parametrize("killed", [False, True], ids=["rolled back", "killed, then the next writer"])
def test_an_interrupted_ingest_leaves_no_files_behind(tmp_path, monkeypatch, killed):
    store = LanceStore(tmp_path / "i")
    _write(store, CORPUS[:2])
    before, info = _lance_data_files(tmp_path / "i"), store.info()
    if killed:  # no rollback in the process: the next transaction finds the versions it wrote
        monkeypatch.setattr(LanceStore, "_discard", lambda self, table, state: None)
    with pytest.raises(KeyboardInterrupt):
        with store.transaction(EMB.name, EMB.dim) as tx:
            tx.delete_documents({"a"})
            tx.add(CORPUS[2:], EMB.embed([c.text for c in CORPUS[2:]]))
            raise KeyboardInterrupt
    if killed:
        monkeypatch.undo()
        with store.transaction(EMB.name, EMB.dim):
            pass
    assert _lance_data_files(tmp_path / "i") <= before
    reader = LanceStore(tmp_path / "i")
    assert (reader.info().chunks, reader.info().documents) == (info.chunks, info.documents)
    assert reader.search_lexical("cats keyboards", 1)[0].chunk.doc_id == "a"


def test_a_full_disk_is_a_store_error(tmp_path, monkeypatch):
    store = LanceStore(tmp_path / "i")
    _write(store, CORPUS[:2])

    def full(self, chunks, vectors):
        raise RuntimeError("lance error: LanceError(IO): No space left on device (os error 28), writer.rs:258:9")

    monkeypatch.setattr("funnel.index.lance_rows.LanceTransaction.add", full)
    with pytest.raises(StoreError, match="No space left on device; it keeps the last ingest"):
        _write(store, CORPUS[2:])
    assert store.info().chunks == 2
