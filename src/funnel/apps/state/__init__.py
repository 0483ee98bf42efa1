"""Where `funnel serve` keeps its state: embedded (LanceDB and SQLite under `data_dir`, as one process needs)
or, with `--database postgresql://…`, in one PostgreSQL that any number of processes share (`db.py`).

The floor of the service: it imports only the core and itself (tests/test_architecture.py), and the HTTP API
and triage stand on it. One layout for every piece: `<piece>.py` holds its protocol, its embedded store, its
PostgreSQL store and `open_<piece>`, which chooses; where that would pass ~350 lines the PostgreSQL store is
`<piece>_pg.py`, and the records and SQL both stores run are `<piece>_rows.py` (`conversation_rows.py`,
`incident_rows.py`; a key's record: `key_records.py`). The pieces: `home.py` (the collections' catalog),
`documents.py` and `files.py` (a collection's documents and original uploads), `jobs*.py` (the job queue and
its workers), `conversations.py`, `keys.py`, `audit.py`, `limits.py`, `metrics.py`, `incidents.py` (what an
incident is made of: `incident_schema.py`; secrets out first: `redact.py`) and `alerts.py`. Underneath:
`sqlite.py` (one versioned SQLite file), `db.py` and `tables.py` (the PostgreSQL pool and each piece's
migrated tables), `replica.py` (searches on a read replica).
"""
