"""A deadline on a whole blocking call, for the HTTP backends.

httpx's timeouts bound each connect, read and write, never the call: a server that sends its answer a byte at
a time never lets one read wait long, and holds the caller for as long as it likes. `call_within` and
`iterate_within` run the call on a daemon thread and stop waiting at the deadline; the abandoned thread ends
on its own (httpx's per-read timeout still applies there) and cannot keep the process from exiting.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


class DeadlineExceeded(Exception):
    """The call did not finish in time; the caller turns it into its own `UpstreamTimeout`."""


def call_within(seconds: float | None, fn: Callable[[], T]) -> T:
    """fn(), or DeadlineExceeded once `seconds` have passed without it returning (None: no deadline)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="funnel-deadline", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise DeadlineExceeded
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def iterate_within(seconds: float, items: Iterator[T]) -> Generator[T, None, None]:
    """The items of `items`, each due within `seconds` of the one before (the first, of the start), read on
    a daemon thread; DeadlineExceeded when one is late. Closing this generator (or a late item) tells the
    reader to close `items` (a generator is closed by the thread that runs it) as soon as it wakes."""
    handed: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def read() -> None:
        try:
            for item in items:
                if stop.is_set():
                    break
                handed.put((True, item))
            else:
                handed.put((True, _END))
        except BaseException as e:  # handed to the consumer
            handed.put((False, e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    threading.Thread(target=read, name="funnel-deadline-reader", daemon=True).start()
    try:
        while True:
            try:
                ok, item = handed.get(timeout=seconds)
            except queue.Empty:
                raise DeadlineExceeded from None
            if not ok:
                raise item
            if item is _END:
                return
            yield item
    finally:
        stop.set()
