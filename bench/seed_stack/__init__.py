"""The parts of bench/compare_seed_stack.py (its docstring says what it measures and how):

- common: paths, constants and helpers every role shares (stdlib only: the seed's venv imports it too)
- seed_side: seed 001's stack from LangChain's parts (role seed, in .venv-seed)
- seed_funnel: the seed's first stage with funnel's FunnelReranker (role seed-funnel, in .venv-seed)
- funnel_side: funnel's own pipeline (roles funnel-ingest and funnel-query, in .venv)
- install_size: du of each install, and which packages are the seed's own (role seed-dists)
- cross_encoder_check: the CrossEncoder's checkpoint, and whether it is funnel's reranker (role seed-check)
- runner: one subprocess per system and phase
- report: the table, the notes under it and results.json
- cli: the command line
"""
