"""Evaluation: datasets, metrics, runs. Imports the core; the core never imports this."""
