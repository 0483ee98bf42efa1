"""Print RELIABILITY.md's table from the counts a reliability run wrote.

    FUNNEL_SOAK=1 FUNNEL_RELIABILITY_OUT=bench/results/reliability-soak.json pytest tests/reliability
    python bench/reliability_report.py bench/results/reliability-soak.json

(`make soak` does both.) Every figure in RELIABILITY.md comes from this output: what each suite tried
(kills, fuzzed inputs, upstream faults, requests), how many of those broke a promise, and the extra
figures a test recorded (seconds, RSS and file descriptors at the start and end of the soak, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SUITES = {
    "crash": "Crash consistency (kills, interrupts, full disk, read-only index)",
    "fuzz": "Fuzzing (hypothesis): inputs per target",
    "upstream": "Upstream faults: faults injected per kind",
    "soak": "Soak: `funnel serve` under mixed load",
    "security": "Security: attacks by an outsider and by a reader key (tests/reliability/test_attacks.py)",
}


def _detail(detail: dict) -> str:
    def show(value) -> str:
        if isinstance(value, float):
            return f"{value:.1f}"
        if isinstance(value, dict):
            return ", ".join(f"{k} {show(v)}" for k, v in value.items())
        return str(value)

    return "; ".join(f"{key.replace('_', ' ')}: {show(value)}" for key, value in detail.items())


def render(record: dict) -> str:
    lines = [
        f"Run: {record['date']} · {record['machine']} · mode `{record['mode']}` · pytest exit status "
        f"{record['exit_status']}",
        "",
    ]
    rows = record["rows"]
    for suite, title in [*SUITES.items(), *((s, s) for s in sorted({r["suite"] for r in rows} - set(SUITES)))]:
        mine = [r for r in rows if r["suite"] == suite]
        if not mine:
            continue
        tried = sum(r["tried"] for r in mine)
        failed = sum(r["failed"] for r in mine)
        lines += [f"### {title}", "", f"{tried} tried, {failed} failed, over {len(mine)} targets.", "",
                  "| target | tried | failed | figures |", "|---|---:|---:|---|"]
        for r in sorted(mine, key=lambda r: r["target"]):
            lines.append(f"| {r['target']} | {r['tried']} | {r['failed']} | {_detail(r['detail'])} |")
        lines.append("")
    total_tried = sum(r["tried"] for r in rows)
    total_failed = sum(r["failed"] for r in rows)
    lines.append(f"**In all: {total_tried} tried, {total_failed} failed.**")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the JSON file FUNNEL_RELIABILITY_OUT named")
    args = parser.parse_args()
    try:
        record = json.loads(args.results.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"reliability_report: cannot read {args.results}: {e}", file=sys.stderr)
        return 2
    print(render(record))
    return 1 if any(r["failed"] for r in record["rows"]) or record["exit_status"] else 0


if __name__ == "__main__":
    sys.exit(main())
