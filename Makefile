# setup (every extra), repro (the default pipeline), test, bench: the README's commands.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export MLFLOW_DISABLE_TELEMETRY ?= true
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup repro test test-all bench bench-gpu bench-install ship-probe
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

bench: setup  ## the product benchmarks (generation, extraction, probe, score, serve, stream, long answers, OpenAI endpoint, monitor): one table
	python benchmarks/run.py

bench-gpu: setup  ## SpanUQ at the paper's shapes on a CUDA GPU
	python benchmarks/bench_gpu.py

bench-install: setup  ## size and time of the scoring install (pip install .) against the full one
	python benchmarks/bench_install.py

ship-probe: setup  ## re-train the shipped probe (cpu-full preset) and re-ship it: make ship-probe MUSHROOM=<mu-shroom checkout>
	bash scripts/retrain_shipped_probe.sh $(MUSHROOM)
