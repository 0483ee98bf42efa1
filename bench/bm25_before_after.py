"""PgStore's BM25 before and after a change of its code, on one synthetic index, in one run.

    .venv/bin/python bench/bm25_before_after.py --chunks 100000 --before ../main

--before is a checkout of the older code (its src/ is imported). One throwaway PostgreSQL (settings of
scale_backends.py) holds, in turn:
  1. the index built by the older code (scale_backends' passages and batches, one transaction, then VACUUM
     ANALYZE), queried by the older code: the 200 SciFact claims, n = 50, then again filtered to the paths
     that start with "d1" (11% of the chunks);
  2. the same index after the first write of this code (a format conversion, when there is one), queried;
  3. a fresh build by this code, queried.
Each phase runs in its own process (importing its own funnel). The top 50 of 2 and 3 are compared with 1:
same chunks in the same order, scores within 1e-9 relative (ties: the same chunks tied for the last place).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIM = 384


def _phase_build(args, store, conn) -> dict:
    import numpy as np
    from scale_backends import build
    from synthetic_scale import passages

    build_s = build(store, passages(args.dataset, args.chunks), np.random.default_rng(0))
    return {"build_s": build_s, **_vacuum(store, conn)}


def _phase_convert(args, store, conn) -> dict:
    started = time.perf_counter()
    with store.transaction(f"random-{DIM}", DIM):
        pass
    return {"convert_s": time.perf_counter() - started, **_vacuum(store, conn)}


def _vacuum(store, conn) -> dict:
    tables = [name for (name,) in conn.execute(
        "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s", [f"{store.prefix}\\_%"]
    ).fetchall()]
    started = time.perf_counter()
    for name in tables:
        conn.execute(f"VACUUM (ANALYZE) {name}")
    sizes = dict(conn.execute(
        "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relname = ANY(%s)", [tables]
    ).fetchall())
    return {"vacuum_s": time.perf_counter() - started, "disk_mb": sum(sizes.values()) / 2**20,
            "tables_mb": {k.removeprefix(store.prefix + "_"): v / 2**20 for k, v in sizes.items()}}


def _phase_query(args, store, conn) -> dict:
    """The claims unfiltered, then filtered to the chunks whose path starts with d1 (11%)."""
    from funnel.index.base import Filter

    with open(args.dataset / "queries.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh][: args.queries]
    out = {"load": os.getloadavg()[0]}
    for name, f in (("", None), ("filtered_", Filter(path_prefix="d1"))):
        for q in queries[:5]:
            store.search_lexical(q, 50, f)
        results, ms = [], []
        for q in queries:
            t0 = time.perf_counter()
            hits = store.search_lexical(q, 50, f)
            ms.append(1000 * (time.perf_counter() - t0))
            results.append([(h.chunk.chunk_id, h.score) for h in hits])
        out.update({f"{name}ms": ms, f"{name}results": results})
    return out


def _phase_update(args, store, conn) -> dict:
    """A small commit into the big index, as a watched folder makes: 10 chunks added, then deleted."""
    import numpy as np
    from synthetic_scale import passages

    from funnel.types import Chunk

    texts = passages(args.dataset, 10_010)[-10:]
    chunks = [Chunk(f"u{i}#0", f"u{i}", 0, t, f"u{i}", f"u{i}", "text", 160) for i, t in enumerate(texts)]
    vectors = np.random.default_rng(1).normal(size=(len(chunks), DIM)).astype(np.float32)
    started = time.perf_counter()
    with store.transaction(f"random-{DIM}", DIM) as tx:
        tx.add(chunks, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    added = time.perf_counter()
    with store.transaction(f"random-{DIM}", DIM) as tx:
        tx.delete_documents({c.doc_id for c in chunks})
    return {"add_10_s": added - started, "delete_10_s": time.perf_counter() - added}


def phase() -> None:
    """One phase, in a process of its own: prints a JSON line."""
    parser = argparse.ArgumentParser()
    for name in ("--phase", "--src", "--dsn", "--prefix"):
        parser.add_argument(name, required=True)
    parser.add_argument("--chunks", type=int, required=True)
    parser.add_argument("--queries", type=int, required=True)
    parser.add_argument("--dataset", type=Path, required=True)
    args = parser.parse_args(sys.argv[2:])
    sys.path[:0] = [args.src, str(HERE)]
    import psycopg

    from funnel.index.postgres import PgStore

    store = PgStore(args.dsn, table_prefix=args.prefix)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        out = {"build": _phase_build, "convert": _phase_convert, "query": _phase_query,
               "update": _phase_update}[args.phase](args, store, conn)
    print(json.dumps(out))


def _groups(hits: list) -> list[set]:
    """Chunk ids in runs of equal scores (within 1e-9 relative)."""
    runs: list[tuple[float, set]] = []
    for chunk_id, score in hits:
        if runs and abs(score - runs[-1][0]) <= 1e-9 * abs(runs[-1][0]):
            runs[-1][1].add(chunk_id)
        else:
            runs.append((score, {chunk_id}))
    return [ids for _, ids in runs]


def _same(a: list, b: list) -> bool:
    """The same top n: equal scores (1e-9 relative), the same chunks at each score; of the chunks tied for
    the last place (which n cuts) either may hold any."""
    if len(a) != len(b) or any(abs(x[1] - y[1]) > 1e-9 * abs(x[1]) for x, y in zip(a, b)):
        return False
    ga, gb = _groups(a), _groups(b)
    return ga[:-1] == gb[:-1] if ga else True


def _agree(before: list, after: list) -> str:
    differ = [i for i, (a, b) in enumerate(zip(before, after)) if not _same(a, b)]
    for i in differ[:3]:
        print(f"# query {i} differs:\n#   before {before[i][:12]}\n#   after  {after[i][:12]}")
    return f"{len(before) - len(differ)}/{len(before)} identical"


def _drop(dsn: str, prefix: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, kind in conn.execute("SELECT relname, relkind FROM pg_class WHERE relkind IN ('r', 'S')"
                                       " AND relname LIKE %s", [f"{prefix}\\_%"]).fetchall():
            conn.execute(f"DROP {'SEQUENCE' if kind == 'S' else 'TABLE'} IF EXISTS {name} CASCADE")


def _report(args, rows: list) -> None:
    from scale_backends import percentiles

    print(f"\n{args.chunks:,} chunks, {args.queries} queries, n = 50, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}")
    print("| index | build s | disk MB | BM25 p50 / p95 ms | filtered p50 / p95 ms | load | top 50 vs before "
          "| add 10 / delete 10 s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, made, queried, updated in rows:
        took = f"{made['build_s']:.1f}" if "build_s" in made else f"(conversion {made['convert_s']:.1f})"
        ms = " | ".join("{:.1f} / {:.1f}".format(*percentiles(queried[k])) for k in ("ms", "filtered_ms"))
        agree = "-" if name == "before" else " + ".join(
            _agree(rows[0][2][k], queried[k]) for k in ("results", "filtered_results"))
        print(f"| {name} | {took} | {made['disk_mb']:,.0f} | {ms} | {queried['load']:.1f} "
              f"| {agree} | {updated['add_10_s']:.2f} / {updated['delete_10_s']:.2f} |")


def main() -> None:
    if sys.argv[1:2] == ["phase"]:
        return phase()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the older code")
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    from scale_backends import start_local_postgres

    (HERE / "out").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"bm25-before-after-{args.chunks}-", dir=HERE / "out"))
    settings = {"shared_buffers": "1GB", "maintenance_work_mem": "2GB", "max_wal_size": "8GB",
                "max_parallel_maintenance_workers": str(max(1, (os.cpu_count() or 2) - 1))}
    dsn, stop = start_local_postgres(root, settings)
    prefix = f"scale{args.chunks}"

    def run(name: str, code: Path) -> dict:
        command = [sys.executable, __file__, "phase", "--phase", name, "--src", str((code / "src").resolve()),
                   "--dsn", dsn, "--prefix", prefix, "--chunks", str(args.chunks), "--queries",
                   str(args.queries), "--dataset", str(args.dataset)]
        out = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        print(f"# {time.strftime('%H:%M:%S')} {name} ({code}): "
              + json.dumps({k: v for k, v in out.items() if not k.endswith(("ms", "results"))}), flush=True)
        return out

    before, after = args.before, HERE.parent
    try:
        rows = [("before", run("build", before), run("query", before), run("update", before))]
        rows.append(("after, converted", run("convert", after), run("query", after), run("update", after)))
        _drop(dsn, prefix)
        rows.append(("after, fresh build", run("build", after), run("query", after), run("update", after)))
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)
    with open(HERE / "out" / f"bm25-before-after-{args.chunks}.json", "w") as fh:
        json.dump(rows, fh)
    _report(args, rows)


if __name__ == "__main__":
    main()
