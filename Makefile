# The two commands of the README: `make run` and `make test`. Both create .venv and
# install the project into it on first use; nothing else needs to be installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CORES ?= 2
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: run test report bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,torch,megatron,slurm]"
	touch $(STAMP)

## run: the default sweep end to end (config/config.yaml) into results/
run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

## report: the HTML report of the last run (results/report.html)
report: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

## test: the whole test suite
test: $(STAMP)
	$(BIN)/python -m pytest

## bench: the benchmarks in bench/
bench: $(STAMP)
	$(BIN)/python bench/backbone.py
	$(BIN)/python bench/simulate.py

clean:
	rm -rf results .snakemake
