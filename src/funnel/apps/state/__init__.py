"""Where `funnel serve` keeps its state: embedded (LanceDB and SQLite under `data_dir`, as one process needs)
or, with `--database postgresql://…`, in one PostgreSQL that any number of processes share (`db.py`)."""
