"""Answer generation: LLM backends and the extractive answer that needs no model server."""
