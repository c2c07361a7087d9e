# daskangel: two commands on a fresh machine.
#   make demo   builds .venv, installs daskangel, trains/demos on a LocalCluster
#   make test   builds .venv, installs with test extras, runs ruff, mypy and pytest
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# This machine sets PYTHONDONTWRITEBYTECODE=1, under which no process writes bytecode:
# pip's compiling of every installed module (most are never imported) was all there
# was, two thirds of the install's CPU, and each of the suite's processes compiled
# daskangel's sources again.  make's Python processes write the bytecode of what they
# import, once (pip installs with --no-compile).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m daskangel.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check daskangel tests benchmarks
	$(VENV)/bin/ruff format --check daskangel tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# the suite in two processes (pytest-xdist), a test file per process at a time
# (module clusters are shared within a file): ~1.3 of 2 cores were busy serially
PYTEST_WORKERS ?= 2

# the package's bytecode first, so the first worker processes, started together, do not
# each compile daskangel's sources (~0.5 s of CPU a process)
pytest: $(STAMP)
	$(PY) -m compileall -q daskangel benchmarks
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# ruff first (a second); then mypy beside pytest: mypy's cold run is ~55 s of one core
# (82 s wall on a fresh clone), and ahead of pytest it left the second core idle.  A
# type error still fails `make test`, once pytest has finished.
test: lint
	$(MAKE) --no-print-directory -j2 typecheck pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_ps.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
