# The two commands a newcomer needs: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-all test-e2e lint bench clean clean-venv

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

# Default suite: unit tests plus the small e2e set; whole-run tests marked `slow` are left to `make test-all`.
test: setup
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -m "not slow" --durations=15 $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-e2e: setup
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check verl tests benchmarks examples
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf outputs .pytest_cache

clean-venv:
	rm -rf $(VENV)
