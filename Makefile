# The README's quick start is `make demo` and `make test`; each creates and reuses .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Real data for tests, demo and benchmarks; outside this workspace hopgym downloads it itself.
HOPGYM_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export HOPGYM_DATA

.PHONY: demo test bench lint format clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,agents,docker,report]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/hopgym demo

test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info
