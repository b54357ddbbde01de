# dphpo: make install | study | test | paper-embedded | lint | bench
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: install study test lint format paper-embedded report bench clean

install: $(STAMP)

# Idempotent: reinstalls only when the pinned requirements or pyproject change.
$(STAMP): envs/requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r envs/requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

study: install
	$(BIN)/snakemake --cores $(CORES) --rerun-incomplete
	@echo "Tables: results/tables/linear_scaling.md, results/tables/hpo_comparison.md; figures: results/figures/"

paper-embedded: install
	$(BIN)/snakemake --cores $(CORES) --rerun-incomplete --configfile config/paper_embedded.yaml paper
	$(BIN)/snakemake --cores $(CORES) --configfile config/paper_embedded.yaml paper --report results/report.html

report: install
	$(BIN)/snakemake --report results/report.html

test: install
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/snakefmt --check .
	$(BIN)/snakemake --lint

format: install
	$(BIN)/snakefmt .

bench: install
	$(BIN)/python benchmarks/trainer.py

clean:
	rm -rf results/* .snakemake
