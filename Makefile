# daskangel: two commands on a fresh machine.
#   make demo   builds .venv, installs daskangel, trains/demos on a LocalCluster
#   make test   builds .venv, installs with test extras, runs ruff, mypy and pytest
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
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

# bytecode for the package first: where PYTHONDONTWRITEBYTECODE is set (this machine)
# no process writes it, and every worker, benchmark and kernel process compiled
# daskangel's sources again on import (~0.5 s of CPU each, hundreds of processes)
pytest: $(STAMP)
	$(PY) -m compileall -q daskangel benchmarks
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

bench: $(STAMP)
	$(PY) benchmarks/bench_ps.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
