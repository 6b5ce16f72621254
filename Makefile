# Every target sets itself up on a fresh machine: it creates .venv and installs what it needs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help venv test demo lint typecheck unit generate synth clean perf-compiled

# The first target, so a bare `make` lists the targets instead of building anything.
help:
	@echo "make test           ruff, mypy --strict, the import-layer contracts and the whole test suite"
	@echo "make demo           simulated GPU fleet + gateway on loopback, gateway vs round-robin, report"
	@echo "make lint           ruff check, ruff format --check, lint-imports"
	@echo "make typecheck      mypy --strict"
	@echo "make unit           the test suite alone (pytest -n 2)"
	@echo "make generate       regenerate the CRDs and schemas derived from schemas/ (igw generate)"
	@echo "make synth          offline CDK synthesis into cdk.out, with cdk-nag"
	@echo "make perf-compiled  the mypyc-compiled hot path against pure Python (PAIRS=3)"
	@echo "make venv           create .venv and install the project with its extras"
	@echo "make clean          remove .venv, cdk.out and the tool caches"
	@echo "Every target but help and clean creates .venv first; igw COMMAND --help for the CLI."

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -e ".[gateway,sim,ops,cdk,dev]"
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check gateway_src cdk tests app.py setup.py build_backend
	$(BIN)/ruff format --check gateway_src cdk tests app.py setup.py build_backend
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy gateway_src/igw cdk app.py tests setup.py build_backend

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2

test: lint typecheck unit

demo: $(STAMP)
	$(BIN)/igw demo

generate: $(STAMP)
	$(BIN)/igw generate

# The mypyc-compiled hot path against pure Python: builds a compiled copy under build/compiled-tree
# (minutes; reused while its sources match) and alternates `igw perf gateway` between the two trees.
perf-compiled: $(STAMP)
	$(BIN)/igw perf compiled --pairs $(or $(PAIRS),3)

synth: $(STAMP)
	$(BIN)/python -m cdk.synth_cli

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
