# The two commands of the README: `make repro` and `make test`.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export MLFLOW_DISABLE_TELEMETRY ?= true
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup repro test test-all bench ship-probe
setup:
	bash scripts/setup.sh

repro: setup  ## set up, then run the whole default pipeline on CPU
	@touch .venv/.repro-start
	dvc repro
	@# the report stage prints the table (SpanUQ beside the floors and every baseline) when it runs;
	@# show it when everything was up to date
	@[ -n "$$(find data -path '*/report/index.html' -newer .venv/.repro-start 2>/dev/null)" ] || python -m spanuq.report

test: setup  ## the default test suite (slow end-to-end runs excluded)
	python -m pytest -q --durations=15

test-all: setup  ## every test, including the slow end-to-end pipeline runs
	python -m pytest -q -m "slow or not slow"

bench: setup
	python benchmarks/bench_generate.py
	python benchmarks/bench_extract.py
	python benchmarks/bench_probe.py
	python benchmarks/bench_score.py
	python benchmarks/bench_serve.py
	python benchmarks/bench_long_speed.py
	python benchmarks/bench_long.py

ship-probe: setup  ## re-train the shipped probe (cpu-full preset) and re-ship it: make ship-probe MUSHROOM=<mu-shroom checkout>
	bash scripts/retrain_shipped_probe.sh $(MUSHROOM)
