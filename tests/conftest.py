import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from pg_support import pg_dsn, pg_server  # noqa: E402,F401  (fixtures: a real PostgreSQL for any test file)
