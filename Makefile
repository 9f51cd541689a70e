# toolgate: developer and CI entry points (`make help` lists them). Every target bootstraps .venv when needed.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := check

VENV        := .venv
STAMP       := $(VENV)/.stamp
BIN         := $(VENV)/bin
# python3.11 when available, else python3 (checked to be >= 3.11 below)
ifndef PYTHON
PYTHON      := $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
endif
PYTEST_ARGS ?=
BENCH_ARGS ?=
TYPECHECK_DIR := .build/typecheck
# the public tool corpus (tests/test_public_corpus.py), installed at test time, never copied in
CORPUS_PACKAGE := bfcl-eval==2026.3.23
CORPUS_STAMP := $(VENV)/.corpus-stamp

.PHONY: help venv demo serve test lint typecheck check wheel-check corpus bench reset clean

# help: list the targets with what each does (read from the comment above each target)
help:
	@awk '/^# [a-z-]+: / { name = substr($$2, 1, length($$2) - 1); text = substr($$0, length($$2) + 4); open = 1; next } \
		/^# / && open { text = text " " substr($$0, 3); next } \
		open && index($$0, name ":") == 1 { printf "make %-12s %s\n", name, text } \
		{ open = 0 }' $(firstword $(MAKEFILE_LIST))

# venv: create .venv and install the project editable with the dev extras
venv: $(STAMP)

# (re)install whenever pyproject.toml changes; recreate .venv if missing or too old
$(STAMP): pyproject.toml
	@if [[ -z "$(PYTHON)" ]]; then echo "error: neither python3.11 nor python3 found on PATH" >&2; exit 1; fi
	@"$(PYTHON)" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: toolgate needs Python >= 3.11 but $(PYTHON) is " + sys.version.split()[0])'
	@if ! "$(BIN)/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "creating $(VENV) with $(PYTHON)"; \
		rm -rf "$(VENV)"; \
		"$(PYTHON)" -m venv "$(VENV)"; \
	fi
	@echo "building $(VENV): installing toolgate editable with its dev extras (a few minutes on a cold cache)..."
	"$(BIN)/python" -m pip install --quiet --upgrade pip
	"$(BIN)/python" -m pip install --quiet -e '.[dev]'
	@echo "$(VENV) is ready"
	@touch "$@"

# demo: run the offline demo (no API key; its SQLite store is .toolgate/demo, started afresh each run)
demo: $(STAMP)
	"$(BIN)/toolgate" demo

# test: the whole pytest suite against a throwaway PostgreSQL (PYTEST_ARGS="-k foo" to filter),
# in parallel (TOOLGATE_TEST_WORKERS, default cores + 1), then the `exclusive` tests alone;
# prints its total time and 25 slowest steps, every step's time in .build/test-durations.txt;
# first installs missing system test tools when root (libfaketime, for the clock-skew tests)
test: $(STAMP) $(CORPUS_STAMP)
	bash scripts/ensure-test-tools.sh
	PYTEST="$(BIN)/pytest" bash scripts/with-postgres.sh bash scripts/run-tests.sh $(PYTEST_ARGS)

# serve: the real `langgraph dev`, offline, on a free loopback port, with its own data directory
serve: $(STAMP)
	bash scripts/serve.sh

# lint: ruff lint rules from pyproject.toml (no formatter check)
lint: $(STAMP)
	"$(BIN)/ruff" check .

# typecheck: mypy on a real (non-editable) install, since type checkers ignore the editable import hook
typecheck: $(STAMP)
	rm -rf "$(TYPECHECK_DIR)" build
	"$(BIN)/pip" install --no-deps --quiet --target "$(TYPECHECK_DIR)" .
	env -u MYPYPATH "$(BIN)/mypy" --config-file pyproject.toml "$(TYPECHECK_DIR)/toolgate"

# check: everything CI cares about locally: lint, typecheck, tests
check: lint typecheck test

# wheel-check: build the wheel from a clean copy, install it in a fresh venv, import every module
wheel-check: $(STAMP)
	bash scripts/check-wheel.sh

# reset: delete the app data only, keeping .venv: .toolgate (the CLI's store, the demo's in
# .toolgate/demo, make serve's in .toolgate/server) and .langgraph_api (langgraph dev's state)
reset:
	rm -rf .toolgate .langgraph_api

# clean: remove every generated artefact: .venv, builds and the app data (make reset keeps .venv)
clean:
	rm -rf $(VENV) .build .toolgate .langgraph_api dist build *.egg-info

# corpus: real published tool definitions (bfcl-eval's, read from the installed package) through
# every importer: loaded, must-accept calls accepted, broken calls accepted, refusal classes;
# printed and written to bench/results/public_corpus.json
corpus: $(CORPUS_STAMP)
	"$(BIN)/python" -m toolgate.evals.public_corpus --out bench/results/public_corpus.json

# the corpus package, without its dependencies: only its data files and type mapping are read
$(CORPUS_STAMP): $(STAMP)
	"$(BIN)/python" -m pip install --quiet --no-deps '$(CORPUS_PACKAGE)'
	@touch "$@"

# bench: measured benchmarks (ratios within one run), written to bench/results/
# (BENCH_ARGS=--full for more rounds; the PostgreSQL ones run on a throwaway server)
bench: $(STAMP)
	PYTHON="$(BIN)/python" BENCH_ARGS="$(BENCH_ARGS)" bash scripts/with-postgres.sh bash bench/run_all.sh
