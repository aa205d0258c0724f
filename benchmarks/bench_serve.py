"""Throughput and latency of `spanuq serve` on loopback at 1, 4 and 16 concurrent clients.

    python benchmarks/bench_serve.py [--model DIR] [--requests 32] [--seconds 120] [--generate]

Starts the real service (`python -m spanuq.cli serve`) in a subprocess, waits for /health,
then for each concurrency level sends --requests requests (bounded by --seconds per level)
from that many concurrent clients and prints answers/s and p50/p95 latency.  Requests
score given answers (bundled prompts with fixed answers of ~40 tokens) unless --generate,
where the backbone answers each prompt.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import httpx
from probes import probe_or_random  # benchmarks/probes.py
from table import report  # benchmarks/table.py: make bench's one table


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def level(url: str, bodies: list[dict], concurrency: int, seconds: float) -> tuple[int, float, list[float], int]:
    lat: list[float] = []
    errors = 0
    queue: asyncio.Queue = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)
    deadline = time.perf_counter() + seconds

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal errors
        while not queue.empty() and time.perf_counter() < deadline:
            body = queue.get_nowait()
            t0 = time.perf_counter()
            r = await c.post(f"{url}/score", json=body)
            lat.append(time.perf_counter() - t0)
            errors += r.status_code != 200

    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as c:
        await asyncio.gather(*(client(c) for _ in range(concurrency)))
    return len(lat), time.perf_counter() - t0, lat, errors


def start_service(model: str, max_new_tokens: int) -> tuple[subprocess.Popen, str]:
    """`spanuq serve` in a subprocess on a free loopback port, once /health answers: (process, base URL)."""
    from spanuq.llm.llamacpp import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "spanuq.cli", "serve", "--model", model, "--port", str(port),
                             "-o", f"score.max_new_tokens={max_new_tokens}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the service did not start")
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--generate", action="store_true", help="let the backbone answer (default: given answers)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    from spanuq.config import load_config
    from spanuq.data.prompts import load_bundled

    cfg = load_config("params.yaml")
    model = probe_or_random(args.model, cfg)
    answer = ("It was first described in the early nineteenth century by a French chemist, who named it after "
              "the Greek word for violet; it is used today in medicine and photography.")
    prompts = [p.text for p in load_bundled()[: args.requests]]
    bodies = [{"prompt": p} if args.generate else {"prompt": p, "response": answer} for p in prompts]
    proc, url = start_service(model, args.max_new_tokens)
    try:
        asyncio.run(level(url, bodies[:2], 1, args.seconds))  # warm-up (and the llama.cpp server with --generate)
        mode = "generated answers" if args.generate else "given answers (~40 tokens)"
        print(f"spanuq serve on loopback, {mode}, up to {args.requests} requests / {args.seconds:.0f} s per level")
        print(f"{'clients':>7} {'done':>5} {'errors':>6} {'answers/s':>10} {'p50 s':>7} {'p95 s':>7}")
        for conc in (1, 4, 16):
            n, wall, lat, errors = asyncio.run(level(url, bodies, conc, args.seconds))
            print(f"{conc:7d} {n:5d} {errors:6d} {n / wall:10.2f} {statistics.median(lat):7.2f} "
                  f"{percentile(lat, 0.95):7.2f}")
            report("serve", f"{conc} client{'s' * (conc > 1)}, {mode}", n / wall, "answers/s",
                   f"p95 {percentile(lat, 0.95):.2f} s, {errors} errors")
        print(f"micro-batches run by the worker: {httpx.get(f'{url}/health').json()['batches']}")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
