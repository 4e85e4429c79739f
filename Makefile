# The two commands of the README: `make run` and `make test`. Both create .venv and
# install what they need into it on first use; nothing else needs to be installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Installed: the package and its dependencies (run), and the test extras (test).
BASE := $(VENV)/.base-installed
EXTRAS := $(VENV)/.extras-installed
# Byte-compile the package up front: the pipeline starts thousands of short commsweep
# processes, and Python reads (though, under PYTHONDONTWRITEBYTECODE, never writes) .pyc files.
COMPILE := $(BIN)/python -m compileall -q src

.PHONY: run test report bench clean setup

setup: $(BASE)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(EXTRAS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test,torch,megatron,slurm]"
	touch $@ $(BASE)

## run: the default sweep end to end (config/config.yaml) into results/, then its HTML report
run: $(BASE)
	$(COMPILE)
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

## report: the HTML report of the last run (results/report.html)
report: $(BASE)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

## test: the whole test suite
test: $(EXTRAS)
	$(COMPILE)
	$(BIN)/python -m pytest

## bench: the quick benchmarks in bench/ (bench/sweep_scale.py, which takes minutes, runs on its own)
bench: $(BASE)
	$(COMPILE)
	$(BIN)/python bench/backbone.py
	$(BIN)/python bench/simulate.py

clean:
	rm -rf results .snakemake
