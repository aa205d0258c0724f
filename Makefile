# The two commands of the README: `make repro` and `make test`.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export MLFLOW_DISABLE_TELEMETRY ?= true
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup repro test test-all bench
setup:
	bash scripts/setup.sh

repro: setup  ## set up, then run the whole default pipeline on CPU
	dvc repro
	@python -m spanuq.evaluate.table data/smollm2-135m/metrics.json 2>/dev/null || true

test: setup  ## the default test suite (slow end-to-end runs excluded)
	python -m pytest -q

test-all: setup  ## every test, including the slow end-to-end pipeline runs
	python -m pytest -q -m "slow or not slow"

bench: setup
	python benchmarks/bench_generate.py
	python benchmarks/bench_extract.py
	python benchmarks/bench_probe.py
