"""Decoding speed of llama.cpp builds on this machine: the portable build that `scripts/setup.sh`
installs (x86-64-v3: AVX2/FMA/F16C) against any other build of the same version, e.g. one
compiled with `-march=native`, interleaved round by round so that load changes hit both alike.

    # a native build to compare with (not what the project installs: it may crash on another CPU)
    CMAKE_ARGS="-DGGML_NATIVE=ON" pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
        llama-cpp-python==0.3.36 -w /tmp/native-wheel
    pip install --no-deps --target /tmp/native-site /tmp/native-wheel/*.whl
    python experiments/llamacpp_build.py --other native=/tmp/native-site --rounds 3

Each round starts one server per build (1 thread, as the pipeline runs it on 2 cores) and
times greedy decoding of the same prompts through `/v1/completions`.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spanuq.llm.llamacpp import LlamaCppServer  # noqa: E402
from spanuq.llm.loading import gguf_path  # noqa: E402
from spanuq.llm.presets import get_preset  # noqa: E402

PROMPTS = ["Tell me a bio of Marie Curie.", "Why is the sky blue?", "Who discovered penicillin, and how?",
           "Explain how vaccines work.", "What happened at the Battle of Hastings?", "Tell me about Ada Lovelace."]
CHAT = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def cpu_flags() -> str:
    try:
        flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    except (OSError, AttributeError):
        return "unknown"
    model = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    keys = ["avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"]
    return f"{model.group(1).strip() if model else '?'}; " + " ".join(k for k in keys if k in flags)


def decode(site: str | None, n_tokens: int, threads: int) -> float:
    """tok/s of greedy decoding of every prompt with the build found first on ``site`` (None: installed)."""
    old = os.environ.get("PYTHONPATH")
    if site:
        os.environ["PYTHONPATH"] = site + (os.pathsep + old if old else "")
    try:
        with LlamaCppServer(gguf_path(get_preset("smollm2-135m")), n_threads=threads, n_ctx=1024) as srv:
            total, t0 = 0, time.perf_counter()
            for p in PROMPTS:
                r = httpx.post(f"{srv.base_url}/completions", timeout=300, json={
                    "prompt": CHAT.format(p), "max_tokens": n_tokens, "temperature": 0.0})
                total += r.json()["usage"]["completion_tokens"]
            return total / (time.perf_counter() - t0)
    finally:
        if site:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", action="append", default=[], metavar="NAME=SITE_DIR",
                    help="another build installed with `pip install --target SITE_DIR` (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    builds = {"installed (portable)": None, **dict(o.split("=", 1) for o in args.other)}
    print(f"cpu: {cpu_flags()}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    speeds: dict[str, list[float]] = {b: [] for b in builds}
    for r in range(args.rounds):
        for name, site in builds.items():
            speeds[name].append(decode(site, args.tokens, args.threads))
            print(f"round {r + 1}: {name:>22}: {speeds[name][-1]:6.1f} tok/s", flush=True)
    for name, v in speeds.items():
        print(f"{name:>22}: median {statistics.median(v):6.1f} tok/s over {len(v)} rounds "
              f"(min {min(v):.1f}, max {max(v):.1f}); load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
