# Two commands set everything up on a fresh clone:
#   make demo   starts the wizard on the built-in demo job (no GPU, no LeRobot needed)
#   make test   runs the whole test suite
# Both create .venv on first use (torch 2.13.0, then this project with its dev extras). Which torch build pip
# takes is pip's choice (on Linux, PyPI's default is the CUDA build, ~5.5 GB with its NVIDIA libraries); the CPU
# build: make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu

PYTHON ?= python3
TORCH_INDEX ?=
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test bench gpu-check lerobot-env slurm-up slurm-down clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpuwizard --preset demo-cpu

LOCAL_SLURM := $(wildcard /tmp/gpuwizard-slurm/slurm.conf)

# the `slurm` tests run when a cluster answers: $SLURM_CONF, or the local one `make slurm-up` starts
# --dist loadgroup: tests that read one shared real run carry its xdist_group and share a worker
# (tests/trainers/conftest.py); --durations=40 shows where the time goes
test: $(STAMP)
	$(PY) -m mypy
	$(if $(SLURM_CONF),,$(if $(LOCAL_SLURM),SLURM_CONF=$(LOCAL_SLURM))) $(PY) -m pytest -n 2 --dist loadgroup -q --durations=40

bench: $(STAMP)
	$(PY) bench/run_all.py

slurm-up:
	bash scripts/slurm-local.sh

slurm-down:
	bash scripts/slurm-local.sh stop

gpu-check: $(STAMP)
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
