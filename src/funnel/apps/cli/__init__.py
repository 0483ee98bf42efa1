"""`funnel` command line. Errors become one line on stderr and an exit code; no tracebacks.

Exit codes: 0 ok; 1 ingest finished but some sources were skipped; 2 bad argument or setting;
3 backend unavailable; 5 index problem; 130 interrupted (the index is left as it was).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import NoReturn

import typer

# The commands register on `app` when their modules are imported, in the order `funnel --help` lists them.
from funnel.apps.cli import configure, indexing, keys, query, serving, triage  # noqa: F401
from funnel.apps.cli import audit  # noqa: F401, I001  (last: `funnel --help` lists it after incidents)
from funnel.apps.cli.common import StopOnce, app, err, out, out_console, redeliver_dropped_interrupts, styled
from funnel.apps.cli.output import window_note
from funnel.apps.cli.serving import exposure_warning
from funnel.errors import FunnelError

try:  # typer >= 0.24 vendors click; older releases use the click package
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

__all__ = ["app", "exposure_warning", "out", "out_console", "run", "window_note"]


def run() -> None:
    """Console entry point: a user mistake never ends in a traceback; neither does a bug (-v shows it)."""
    sys.unraisablehook = redeliver_dropped_interrupts
    try:
        _run()
    finally:
        _quiet_exit()


def _quiet_exit() -> None:
    """From here the command's work is done (committed or rolled back): a Ctrl-C while the interpreter shuts
    down (joining threads, atexit) would print 'Exception ignored ... KeyboardInterrupt' with a traceback;
    it ends the process at once instead, with one line and the usual 130."""
    if threading.current_thread() is not threading.main_thread():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say anyway
            pass
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _exit_now)


def _exit_now(signum, frame) -> None:
    if not StopOnce.said_any:  # one line per command: an "interrupted" already said is enough
        os.write(2, b"interrupted while exiting; the command had finished\n")
    os._exit(130)


def _interrupted() -> NoReturn:
    """A Ctrl-C reached the top: one line and 130, at once. The command's work is committed or rolled back
    by now (the KeyboardInterrupt unwound its transactions), so the process ends without the interpreter's
    shutdown, where a second Ctrl-C would find SIGINT's default action restored and kill it (-2), or native
    threads would be joined."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        StopOnce.said_any = True
        signal.signal(signal.SIGINT, _exit_now)
    err.print("interrupted")
    _end_interrupted()


def _end_interrupted() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say anyway
            pass
    os._exit(130)


def _run() -> None:
    try:
        code = app(standalone_mode=False)  # returns typer.Exit's code instead of raising it
        if code == 130 and not StopOnce.said_any:  # typer's own answer to a Ctrl-C before a command ran
            err.print("interrupted")
        if code == 130:  # a command stopped by Ctrl-C has rolled back: end now, as `_interrupted` does
            _end_interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Abort:
        _interrupted()
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except click_exceptions.ClickException as e:  # usage errors: typer/click format them
        e.show()
        sys.exit(2)
    except FunnelError as e:  # every command's user-facing error: one line and its exit code
        err.print(styled("error:", "red", str(e)))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as e:
        if logging.getLogger().isEnabledFor(logging.INFO):
            err.print_exception()
        err.print(styled("error:", "red", f"unexpected {type(e).__name__}: {e} (run with -v for details)"))
        sys.exit(70)
