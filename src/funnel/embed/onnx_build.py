"""Moved to `funnel.onnx.build`; this name keeps `python -m funnel.embed.onnx_build`, as the README gives it,
working."""

import sys

from funnel.onnx.build import *  # noqa: F403
from funnel.onnx.build import main

if __name__ == "__main__":
    sys.exit(main())
