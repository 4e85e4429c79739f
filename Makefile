# The two commands of the README: `make run` and `make test`. Both create .venv and
# install what they need into it on first use; nothing else needs to be installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# The sweep of `make run` and `make report`: make run CONFIG=my.yaml runs another one.
CONFIG ?= config/config.yaml
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
	$(BIN)/python -m pip install --quiet -e ".[test,torch,megatron,slurm,storage,kubernetes,aws-batch]"
	$(BIN)/python -m pip install --quiet --no-deps mlc-chakra==1.0.0 "protobuf==7.36.*"
	touch $@ $(BASE)

## run: a sweep end to end (CONFIG, default config/config.yaml) into results/, then its HTML report
# The config is checked first by commsweep itself: a mistake is named with its file, line
# and column (or key), exit status 2, before Snakemake starts. Snakemake is not even started
# when nothing it reads or writes changed since it last ended well here (it would find nothing
# to do: commsweep.orchestration.current). The report is made again only when it is older than
# what it shows (REPORT_INPUTS), so a run with nothing to do does nothing.
run: $(BASE)
	$(COMPILE)
	$(BIN)/commsweep sweep --check $(CONFIG) --run-unless-current $(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG)
	@$(MAKE) --no-print-directory $(REPORT) CONFIG=$(CONFIG)

## report: the HTML report of the last run of CONFIG (results/report.html); refuses results of another sweep
report: $(BASE)
	$(BIN)/commsweep sweep --check $(CONFIG) --made results/run.json
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) --report $(REPORT)

# What the report shows: every result it holds is an input of the check, whose verdict
# (results/status.txt) every run that changed a result rewrites last; its front page and
# captions (workflow/report); the rules it draws and lists.
REPORT := results/report.html
REPORT_INPUTS := results/status.txt $(wildcard workflow/report/*.rst) Snakefile $(wildcard workflow/rules/*.smk)

$(REPORT): $(REPORT_INPUTS)
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) --report $@

## test: the whole test suite, on TEST_WORKERS pytest-xdist workers (default: one per core)
# loadfile: a test file goes to one worker; the files in the order tests/conftest.py puts them.
# The slowest tests are listed at the end, so a new slow one is seen in CI's log.
# nproc: the CPUs this process may use (xdist's `auto` counts physical cores: 1 on many 2-vCPU machines).
TEST_WORKERS ?= $(shell nproc)
test: $(EXTRAS)
	$(COMPILE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

## bench: the quick benchmarks in bench/ (bench/sweep_scale.py, which takes minutes, runs on its own)
bench: $(BASE)
	$(COMPILE)
	$(BIN)/python bench/backbone.py
	$(BIN)/python bench/simulate.py

clean:
	rm -rf results .snakemake
