"""Applications on the core: CLI (and later the HTTP API and triage). The core never imports these."""
