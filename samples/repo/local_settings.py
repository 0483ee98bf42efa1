"""Developer overrides. Ignored by .gitignore, so funnel must not index this file."""

DATABASE_URL = "sqlite:///local-only.db"
DEBUG = True
