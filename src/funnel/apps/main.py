"""The `funnel` command's entry point. It imports nothing heavy itself: the CLI's libraries (LanceDB,
onnxruntime, pyarrow) take seconds to load on a busy machine, and a Ctrl-C in those seconds is one line,
not a traceback."""

from __future__ import annotations

import sys


def run() -> None:
    try:
        from funnel.apps.cli import run as cli
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    cli()
