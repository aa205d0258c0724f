# setup (every extra), repro (the default pipeline), test, bench: the README's commands.
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export MLFLOW_DISABLE_TELEMETRY ?= true
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup repro test test-all bench bench-gpu bench-install bench-lanes ship-probe guarantees
setup:
	bash scripts/setup.sh

repro: setup  ## set up, then run the whole default pipeline on CPU
	@touch .venv/.repro-start
	dvc repro
	@# the report stage prints the table (SpanUQ beside the floors and every baseline) when it runs;
	@# show it when everything was up to date
	@[ -n "$$(find data -path '*/report/index.html' -newer .venv/.repro-start 2>/dev/null)" ] || python -m spanuq.report

# a worker per CPU (up to 4; tests/conftest.py gives each its own CPUs), a test file to a worker
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile

test: setup  ## the default test suite (slow end-to-end runs excluded)
	python -m pytest -q $(PYTEST_WORKERS) --durations=15

test-all: setup  ## every test, including the slow end-to-end pipeline runs
	python -m pytest -q $(PYTEST_WORKERS) -m "slow or not slow"

bench: setup  ## the product benchmarks (generation, extraction, probe, score, serve, stream, long answers, OpenAI endpoint, monitor): one table
	python benchmarks/run.py

bench-gpu: setup  ## SpanUQ at the paper's shapes on a CUDA GPU
	python benchmarks/bench_gpu.py

bench-lanes: setup  ## given-answer /score latency while generations run, and the service's RSS over a 5,000-request soak
	python benchmarks/bench_lanes.py

bench-install: setup  ## the README's scoring command in a fresh venv (packages, size, time; no CUDA package) against the full install
	python benchmarks/bench_install.py

ship-probe: setup  ## re-train the shipped probe (cpu-full preset) and re-ship it: make ship-probe MUSHROOM=<mu-shroom checkout>
	bash scripts/retrain_shipped_probe.sh $(MUSHROOM)

UNSEEN ?= data-unseen
UNSEEN_OPTS = --preset cpu-full -o paths.data=$(UNSEEN) -o prompts.source=file -o prompts.file=examples/unseen_prompts.jsonl \
	-o prompts.n_prompts=null -o prompts.split_by=prompts
guarantees: setup  ## re-fit the shipped probe's conformal.json and the tables of docs/guarantees.md (after ship-probe)
	@[ -f $(UNSEEN)/smollm2-135m/labels.jsonl ] || for s in prompts generate label; do spanuq $$s $(UNSEEN_OPTS) || exit 1; done
	spanuq extract $(UNSEEN_OPTS)
	spanuq calibrate --model shipped --out spanuq/probes/smollm2-135m/conformal.json \
		--alpha 0.05 0.1 0.2 --guarantee factuality fdr --delta 0.1 \
		--check 1000 --check-data $(UNSEEN) --doc docs/guarantees.md
