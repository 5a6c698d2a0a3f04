# Two commands set everything up on a fresh clone:
#   make demo   starts the wizard on the built-in demo job (no GPU, no LeRobot needed)
#   make test   runs the whole test suite
# Both create .venv on first use (torch 2.13.0 CPU build, then this project with its dev extras).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test bench gpu-check lerobot-env clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpuwizard --preset demo-cpu

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

bench: $(STAMP)
	$(PY) bench/run_all.py

gpu-check: $(STAMP)
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
