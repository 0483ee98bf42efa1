"""A tiny user-management service, used by funnel's triage demo."""
