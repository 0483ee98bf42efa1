import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from pg_support import pg_dsn, pg_server  # noqa: E402,F401  (fixtures: a real PostgreSQL for any test file)
from e5_support import e5_model_dir, e5_models  # noqa: E402,F401  (fixtures: multilingual-e5-small)

# Run in the background (`nohup make test &`), a shell starts pytest with SIGINT ignored, and every child the
# tests start inherits that: the Ctrl-C tests then see processes that cannot be interrupted. A Python handler
# here is reset to the default in each child at exec, so the children get Ctrl-C as they would from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402

# `make test-fast` runs `-m "not model and not slow"`. Besides the tests marked by hand, these count as slow:
# every test in a module that starts the CLI, a server or PostgreSQL for its tests, every reliability test,
# and every test that runs the real `funnel` CLI (`test_cli_*`, `test_funnel_serve_*`).
PROCESS_MODULES = {
    "test_cli.py", "test_api_ask.py", "test_api_collections.py", "test_api_ingest_jobs.py",
    "test_store_postgres.py", "test_triage_api.py", "test_export_checkpoint.py", "test_mcp.py",
    "test_state_db.py", "test_state_jobs.py", "test_state_triage.py", "test_state_metrics_conversations.py",
    "test_api_conversations.py",
    "test_api_database.py", "test_api_processes.py", "test_api_replica.py",
}


def pytest_collection_modifyitems(items):
    for item in items:
        path = item.path
        if path.name in PROCESS_MODULES or "reliability" in path.parts or item.name.startswith(("test_cli", "test_funnel_serve")):
            item.add_marker(pytest.mark.slow)
