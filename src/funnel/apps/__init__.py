"""Applications on the core, one direction inside: `cli/` → `api/` and `triage/` → `state/` → the core.

- `state/`: the service's floor (collections, documents, jobs, conversations, keys, audit, limits, metrics,
  incidents), embedded or on PostgreSQL; it imports only the core.
- `api/`: the HTTP service (`funnel serve`); `triage/`: error triage; both stand on `state/`.
- `cli/`: the commands; the only part that may import every other, and nothing imports it.
- `settings.py` (funnel.toml, FUNNEL_* variables) and `factory.py` (the parts a setting names).

The core never imports these; tests/test_architecture.py keeps every rule above."""
