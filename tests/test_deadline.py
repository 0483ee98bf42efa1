"""`funnel.deadline`: a whole call, and each item of a stream, bounded in time on a daemon thread."""

from __future__ import annotations

import threading
import time

import pytest

from funnel.deadline import DeadlineExceeded, call_within, iterate_within


def test_call_within_returns_raises_or_gives_up_in_time():
    assert call_within(1, lambda: 42) == 42
    with pytest.raises(KeyError):
        call_within(1, lambda: {}["missing"])
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        call_within(0.2, lambda: time.sleep(5))
    assert time.monotonic() - t0 < 1


def test_iterate_within_bounds_each_item_not_the_whole_stream():
    def steady():
        for i in range(5):
            time.sleep(0.1)  # 0.5 s in all, each item well within 0.3 s
            yield i

    assert list(iterate_within(0.3, steady())) == [0, 1, 2, 3, 4]

    def stalls():
        yield "first"
        time.sleep(5)
        yield "late"

    got, t0 = [], time.monotonic()
    with pytest.raises(DeadlineExceeded):
        for item in iterate_within(0.2, stalls()):
            got.append(item)
    assert got == ["first"] and time.monotonic() - t0 < 1


def test_closing_the_stream_closes_the_source_in_its_own_thread():
    closed = threading.Event()
    threads = []

    def source():
        try:
            while True:
                time.sleep(0.02)
                yield "x"
        finally:
            threads.append(threading.current_thread())
            closed.set()

    stream = iterate_within(1, source())
    assert next(stream) == "x"
    stream.close()
    assert closed.wait(2) and threads[0] is not threading.current_thread()


def test_an_error_in_the_source_reaches_the_reader():
    def broken():
        yield 1
        raise ValueError("broke")

    stream = iterate_within(1, broken())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="broke"):
        next(stream)
