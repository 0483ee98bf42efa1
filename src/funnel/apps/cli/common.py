"""What every `funnel` command shares: the consoles, the option types, settings from flags, and `StopOnce`
(a Ctrl-C that stops a command once, cleanly)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import warnings
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console
from rich.text import Text

from funnel import embed, generate, rerank
from funnel.apps.settings import load_settings
from funnel.config import bounds, range_text
from funnel.engine_config import GroupingConfig
from funnel.errors import FunnelError
from funnel.rerank.policies import PolicyChoice
from funnel.retrieve.first_stage import Retrieval

app = typer.Typer(add_completion=False, no_args_is_help=True, help="funnel: two-stage retrieval you can trust.")
# Piped output gets a wide fixed width, so tables are not squeezed to 80 columns in logs.
# markup=False: document text, paths and error messages are printed as they are ("[/x]" in a code
# chunk is not a style tag). Styles are added with Text objects only.
out = Console(soft_wrap=True, markup=False, highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False, width=None if sys.stderr.isatty() else 160)


def styled(label: str, style: str, rest: str) -> Text:
    return Text.assemble((label, style), " ", rest)


IndexOpt = Annotated[
    Optional[str], typer.Option("--index", help="index directory or postgresql:// URL \\[env FUNNEL_INDEX]")
]
EmbedderOpt = Annotated[Optional[str], typer.Option(help=embed.REGISTRY.help())]
# The range is checked once, by the settings (GroupingConfig.k's): a flag out of it is one line, as a bad
# funnel.toml value is.
KOpt = Annotated[Optional[int], typer.Option(
    "--k", "-k", help=f"documents to return, {range_text(bounds(GroupingConfig, 'k'))}")]
PolicyOpt = Annotated[Optional[str], typer.Option(help=PolicyChoice.forms())]
RetrievalOpt = Annotated[Optional[str], typer.Option(help=Retrieval.help())]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
RerankerOpt = Annotated[Optional[str], typer.Option(help=rerank.REGISTRY.help())]
LLM_HELP = generate.REGISTRY.help()


def fail(e: FunnelError) -> NoReturn:
    """One line on stderr and the error's exit code, from inside a command (as `run()` does for a FunnelError
    that leaves one)."""
    err.print(styled("error:", "red", str(e)))
    raise typer.Exit(e.exit_code)


def out_console() -> Console:
    """stdout's console, for a command whose own `out` parameter hides the module's."""
    return out


def deliver_again() -> None:
    """Python prints and drops a KeyboardInterrupt raised while a finalizer (a weakref callback, a __del__,
    such as psycopg's connection being collected) runs: deliver it again, or that Ctrl-C would stop nothing
    and print a traceback. From another thread, a moment later: raised now, it would be dropped too."""
    again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
    again.daemon = True
    again.start()


def redeliver_dropped_interrupts(unraisable, previous=sys.unraisablehook) -> None:
    """The process's `sys.unraisablehook` outside a StopOnce: the same redelivery, whatever handler is in
    force then (Python's own raises KeyboardInterrupt in the main code, which `run()` turns into one line)."""
    if unraisable.exc_type is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
        deliver_again()
    else:
        previous(unraisable)


class StopOnce:
    """A context in which the first Ctrl-C says `message` and stops the command (KeyboardInterrupt, so
    transactions roll back), and later ones are ignored until the process ends. A second
    KeyboardInterrupt would cut the rollback short, and leave onnxruntime's or Lance's native threads
    running into interpreter shutdown: a C++ abort ("terminate called without an active exception")."""

    said_any = False  # by any instance: run() says "interrupted" when typer turned a Ctrl-C into exit 130

    def __init__(self, message: str):
        self.message = message
        self.said = False
        self._previous = self._previous_hook = None

    def say(self) -> None:
        """The message, once (a Ctrl-C just before the handler was set is said by the caller)."""
        if not self.said:
            self.said = StopOnce.said_any = True
            err.print(self.message)

    def _first(self, signum, frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.say()
        # A LanceDB call cut short leaves its coroutine unawaited; Python would warn at exit.
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        raise KeyboardInterrupt

    def _dropped(self, unraisable) -> None:
        if unraisable.exc_type is KeyboardInterrupt and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._first)
            deliver_again()
        else:
            self._previous_hook(unraisable)

    def __enter__(self) -> StopOnce:
        # Signals can only be set in the main thread; an ignored SIGINT (a background job) stays ignored.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) not in (
            signal.SIG_IGN, None
        ):
            self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._dropped
            self._previous = signal.signal(signal.SIGINT, self._first)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is None:
            return
        sys.unraisablehook = self._previous_hook
        if signal.getsignal(signal.SIGINT) == self._first:  # not interrupted: back to normal
            signal.signal(signal.SIGINT, self._previous)



def settings_from(**flags):
    """Settings from the command's flags over the environment and funnel.toml (a bad one: FunnelError, which
    `run()` turns into one line and exit 2). A flag is named by its flat name (`reranker`, `data_dir`,
    `database`: `funnel.apps.settings.FLAT_NAMES`), which puts it in its section's key (rerank.backend,
    serve.data_dir, database.url); only funnel.toml and the environment call the flat names deprecated."""
    return load_settings(**flags)


def _print_version(value: bool) -> None:
    if value:
        import funnel

        out.print(f"funnel {funnel.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log details")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    level = logging.INFO if verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # psycopg gives its logger a level of its own (WARNING) unless one is set: say only errors here too
    # (a Ctrl-C mid-query otherwise adds "error ignored in rollback" lines).
    logging.getLogger("psycopg").setLevel(level)

