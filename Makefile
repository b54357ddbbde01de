# dphpo: make install | study | check (lint + test) | test | lint | paper-embedded | bench | gpu-check[-language]
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: install study check test lint format paper-embedded report bench gpu-check gpu-check-language clean

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
	@echo "To publish (results/ holds internal files): $(BIN)/dphpo release results release && $(BIN)/dphpo verify --release release"

# Every table and figure of the paper, offline (~40 min vision + ~70 min language on 2 cores), then the HTML report. The full
# grid on a GPU box: make paper-embedded PAPER_CONFIG=config/paper.yaml (cluster: profiles/README.md).
PAPER_CONFIG ?= config/paper_embedded.yaml
paper-embedded: install
	$(BIN)/dphpo check-config $(PAPER_CONFIG)
	$(BIN)/snakemake --cores $(CORES) --rerun-incomplete --configfile $(PAPER_CONFIG) --replace-workflow-config paper
	$(BIN)/snakemake --cores $(CORES) --configfile $(PAPER_CONFIG) --replace-workflow-config paper --report results/report.html
	@echo "Tables: results/tables/table*.{md,csv,tex}; figures: results/figures/; report: results/report.html"

report: install
	$(BIN)/snakemake --report results/report.html

# What CI runs (.ci/run): the linters, then the whole test suite.
check: lint test

test: install
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check src tests workflow/scripts benchmarks experiments
	$(BIN)/snakefmt --check .
	$(BIN)/snakemake --lint

format: install
	$(BIN)/snakefmt .

bench: install
	$(BIN)/python benchmarks/trainer.py

# On a GPU box: the tiny study on the GPU against the CPU, release by release, then the trainer,
# fine-tuning and extraction benchmarks on the GPU (benchmarks/gpu_check.py; exit 1 if a release differs).
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py

# The same for the embedded language rows that need no package model (the causal-LM studies of
# config/paper_embedded.yaml, fine-tuned from the GPT-2 the workflow pretrains; the CPU half is the slow one).
gpu-check-language: install
	$(BIN)/python benchmarks/gpu_check.py --language config/paper_embedded.yaml --no-benchmarks

clean:
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf .snakemake
