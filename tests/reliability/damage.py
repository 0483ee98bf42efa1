"""A real sample damaged the ways files get damaged (cut short, bytes flipped, bytes spliced in, junk after
the end): the fuzzing of the loaders (`test_reliability_loaders.py`) and of uploads
(`test_reliability_fuzz.py`)."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def damaged(draw, sample: bytes) -> bytes:
    raw = bytearray(sample)
    how = draw(st.sampled_from(["truncate", "flip", "splice", "garbage-tail"]))
    if how == "truncate" or not raw:
        return bytes(raw[: draw(st.integers(0, len(raw)))])
    if how == "flip":
        for _ in range(draw(st.integers(1, 20))):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        return bytes(raw)
    if how == "splice":
        at = draw(st.integers(0, len(raw)))
        return bytes(raw[:at]) + draw(st.binary(max_size=200)) + bytes(raw[at:])
    return bytes(raw) + draw(st.binary(min_size=1, max_size=2000))
