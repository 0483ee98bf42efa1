"""Error triage (seed 000): an error report -> the repository files that matter -> an LLM analysis -> Slack."""
