# personagen — run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
N ?= 180
SEED_SET := $(SEED)
SEED ?= 7
PROFILE ?= default
LLM ?=
# The embedded model's native build enables AMX on some CPUs and crashes at the first decode;
# these flags build a portable AVX2 llama.cpp instead.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF

.PHONY: help install test test-slow lint prompts-check prompts-try plan calibrate-weights generate serve bench clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install personagen with its dev extras (first time 5-8 min: builds llama.cpp)

test: $(STAMP) ## run the fast test suite (sets itself up on a fresh machine)
	$(PY) -m pytest -m 'not slow'

test-slow: $(STAMP) ## run the slow tests (kill -9 and SIGTERM resume, concurrency, Dask, the refresh schedule)
	$(PY) -m pytest -m slow

lint: $(STAMP) ## run ruff
	$(VENV)/bin/ruff check pipeline schemas flows tests bench

prompts-check: $(STAMP) ## lint every prompt template against its context model
	$(VENV)/bin/personagen prompts check

prompts-try: $(STAMP) ## one template on a real persona, its call and the stage's verdict: make prompts-try T=write_sessions.turn_user [LLM=local]
	$(VENV)/bin/personagen prompts try $(T) $(if $(LLM),--llm $(LLM),)

plan: $(STAMP) ## plan N personas' timelines without any model: make plan N=5 SEED=7
	$(VENV)/bin/personagen plan --n $(N) --seed $(SEED) --out outputs/plan

calibrate-weights: $(STAMP) ## after editing the taxonomy's events: lower the weights of events whose (event -> change) pair reaches over ~2% of an N=180 run
	$(VENV)/bin/python -m pipeline.run.calibrate

generate: $(STAMP) ## generate and publish a dataset: make generate N=180 [PROFILE=default] [LLM=local] [SEED=7]
	$(VENV)/bin/personagen generate --n $(N) --profile $(PROFILE) $(if $(SEED_SET),--seed $(SEED),) $(if $(LLM),--llm $(LLM),)

serve: $(STAMP) ## start (or reuse) a Prefect server on loopback and serve the weekly refresh deployment
	flows/serve.sh $(PROFILE) $(if $(filter command line,$(origin N)),$(N),)

LLAMA_BENCH := $(VENV)/llama.cpp/bin/llama-batched-bench
$(LLAMA_BENCH): $(STAMP)
	PY=$(PY) bench/build_llama_bench.sh $(VENV)/llama.cpp

bench: $(STAMP) $(LLAMA_BENCH) ## run every benchmark and write bench/results.md (first time +7 min: builds llama-batched-bench)
	LLAMA_BATCHED_BENCH=$(LLAMA_BENCH) $(PY) bench/run.py

clean: ## remove caches and generated outputs (keeps .venv)
	rm -rf outputs/* .pytest_cache .ruff_cache
