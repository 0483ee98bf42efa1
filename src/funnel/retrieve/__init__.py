"""First stage: dense and lexical retrieval, fused."""
