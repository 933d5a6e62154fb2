# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Without a GPU the local CPU wheel torch==2.13.0 is installed; on GPU machines
# override it, e.g. HARNESS_TORCH_SPEC='torch==2.11.0' make test.
PYTHON ?= python3
VENV ?= .venv
HARNESS_TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(HARNESS_TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,lmeval,pipelines,conformance]"
	# vLLM's emulation functions for `moe-harness conform`: its pinned torch stack is not wanted
	$(BIN)/python -m pip install -q --no-deps "vllm==0.33.0" "pyzmq>=25"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/moe-harness run

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV)
