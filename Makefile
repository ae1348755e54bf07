# The two commands a newcomer needs: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test's processes (pytest-xdist); each test file's tests stay in one process (--dist loadscope), so its
# module fixtures (a local Ray, a built model) start once. PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

.PHONY: setup demo test test-all test-e2e lint docs bench clean clean-venv

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

# Default suite: unit tests plus the small e2e set; whole-run tests marked `slow` are left to `make test-all`.
test: setup
	$(VENV)/bin/lint-imports --no-cache
	$(MKDOCS) build --strict
	$(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadscope --durations=15 $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-e2e: setup
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check verl tests benchmarks examples
	$(VENV)/bin/lint-imports --no-cache

# The user docs site (mkdocs.yml) into site/. No -q: mkdocs 1.6 then hides the warnings --strict would fail on.
docs: setup
	$(MKDOCS) build --strict

clean:
	rm -rf outputs .pytest_cache site

clean-venv:
	rm -rf $(VENV)
