# The two commands of the README: `make run` and `make test`. Both create .venv and
# install what they need into it on first use; nothing else needs to be installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 2
# The sweep of `make run` and `make report`: make run CONFIG=my.yaml runs another one.
CONFIG ?= config/config.yaml
# Its results folder: the config's `results` (default results/), or RESULTS=DIR here, which
# Snakemake gets as --config results=DIR.
RESULTS ?=
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Installed: the package and its dependencies (run), and the test extras (test).
BASE := $(VENV)/.base-installed
EXTRAS := $(VENV)/.extras-installed
# Byte-compile the package up front: the pipeline starts thousands of short commsweep
# processes, and Python reads (though, under PYTHONDONTWRITEBYTECODE, never writes) .pyc files.
# Only when a source file changed since (the stamp is in .snakemake/, which `make clean` removes).
SOURCES := $(wildcard src/commsweep/*.py src/commsweep/*/*.py src/commsweep/*/*/*.py)
COMPILED := .snakemake/commsweep/compiled
# Ctrl-C meanwhile ends it as a signal does, without a traceback (make says "Interrupt").
COMPILE := $(BIN)/python -c "import _signal; _signal.signal(2, _signal.SIG_DFL); import compileall, sys; sys.exit(not compileall.compile_dir('src', quiet=1))"
# The sweep as commsweep checks it, and Snakemake's command for it.
SWEEP := $(CONFIG)$(if $(RESULTS), --results $(RESULTS))
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG)$(if $(RESULTS), --config results=$(RESULTS))

.PHONY: run test report bench clean setup compare-sweeps

setup: $(BASE)

$(BIN)/python:
	@echo "commsweep: creating $(VENV) (a Python virtual environment for the package; once)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip

$(BASE): pyproject.toml | $(BIN)/python
	@echo "commsweep: installing the package and Snakemake into $(VENV) (once, about a minute; nothing is printed meanwhile)"
	$(BIN)/python -m pip install --quiet -e .
	@touch $@

$(EXTRAS): pyproject.toml | $(BIN)/python
	@echo "commsweep: installing the test and optional extras into $(VENV) (torch, megatron-core, cluster plugins: once, several minutes)"
	$(BIN)/python -m pip install --quiet -e ".[test,torch,megatron,slurm,storage,kubernetes,aws-batch]"
	$(BIN)/python -m pip install --quiet --no-deps mlc-chakra==1.0.0 "protobuf==7.36.*"
	@touch $@ $(BASE)

$(COMPILED): $(SOURCES) | $(BIN)/python
	@$(COMPILE)
	@mkdir -p $(@D) && touch $@

## run: a sweep end to end (CONFIG, default config/config.yaml; RESULTS, default its `results`), then its HTML report
# The config is checked first by commsweep itself: a mistake is named with its file, line
# and column (or key), exit status 2, before Snakemake starts; so is another Snakemake
# running here (this run stops after naming it). Snakemake is not even started when nothing
# it reads or writes changed since it last ended well here (it would find nothing to do:
# commsweep.orchestration.current); when it is, it makes the report when the run ends
# (--report-after-run); the report alone is made again only when it is missing or older
# than what it shows, so a run with nothing to do does nothing.
run: $(BASE) $(COMPILED)
	$(BIN)/commsweep sweep --check $(SWEEP) --with-report --run-unless-current $(SNAKEMAKE)

## report: the HTML report of the last run of CONFIG (report.html in its results folder); refuses results of another sweep
report: $(BASE) $(COMPILED)
	$(BIN)/commsweep sweep --check $(SWEEP) --made --report-with $(SNAKEMAKE)

## compare-sweeps: two sweeps' answers side by side (A=DIR B=DIR, two results folders), to stdout or OUT=FILE
compare-sweeps: $(BASE) $(COMPILED)
	@$(if $(and $(A),$(B)),true,echo "make compare-sweeps: give two results folders: make compare-sweeps A=DIR B=DIR" >&2; exit 2)
	$(BIN)/commsweep compare-sweeps $(A) $(B)$(if $(OUT), -o $(OUT))

## test: the whole test suite, on TEST_WORKERS pytest-xdist workers (default: one per core)
# loadfile: a test file goes to one worker; the files in the order tests/conftest.py puts them.
# The slowest tests are listed at the end, so a new slow one is seen in CI's log.
# nproc: the CPUs this process may use (xdist's `auto` counts physical cores: 1 on many 2-vCPU machines).
TEST_WORKERS ?= $(shell nproc)
test: $(EXTRAS) $(COMPILED)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

## bench: the quick benchmarks in bench/ (bench/sweep_scale.py, which takes minutes, runs on its own)
bench: $(BASE) $(COMPILED)
	$(BIN)/python bench/backbone.py
	$(BIN)/python bench/simulate.py

## clean: remove the results (RESULTS=DIR: that folder alone) and Snakemake's state of this folder
clean:
	rm -rf $(if $(RESULTS),$(RESULTS),results .snakemake)
