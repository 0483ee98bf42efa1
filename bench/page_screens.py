"""The web page's main states as screenshots, for BENCHMARKS.md: the browser tests of the page run with
FUNNEL_SCREENSHOTS set, so each state they check is also kept, and a summary says which were made.

    .venv/bin/python bench/page_screens.py                 # -> bench/results/page/*.png, page.json
    .venv/bin/python bench/page_screens.py --out DIR

The states (each one asserted by the test that takes it, in Debian's chromium-headless-shell against funnel's
real app on 127.0.0.1): empty-load (a fresh server, no request answering 400 or more), calibrated and
calibrating (the Calibrate button), answer-with-citations, abstention, ask-only-these, error; on a service
with keys, keys-prompt (asked for a key), keys-reader (a reader of one collection) and keys-admin. Needs what
`make browser` installs; without it the tests skip and this says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_web_page.py", "tests/test_web_page_states.py", "tests/test_web_page_keys.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "page")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    env = {**os.environ, "FUNNEL_SCREENSHOTS": str(out)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH")]))
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *TESTS],
                         check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr.strip()[-300:]
    shots = sorted(p.name for p in out.glob("*.png"))
    summary = {"tests": TESTS, "result": tail, "exit": run.returncode, "seconds": round(time.monotonic() - started, 1),
               "screenshots": shots}
    (out / "page.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    if run.returncode != 0:
        print(run.stdout[-4000:], run.stderr[-2000:], sep="\n", file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
