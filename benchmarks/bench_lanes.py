"""Does cheap work wait?  Given-answer `/score` latency while generations run, and the service's memory
over a long mixed soak.

    python benchmarks/bench_lanes.py                        # 1,000 mixed requests at concurrency 8, then RSS
    python benchmarks/bench_lanes.py --requests 1000 --soak 5000
    python benchmarks/bench_lanes.py --requests 40 --soak 0 # a quick check that it runs

Starts the real service (`python -m spanuq.cli serve --model shipped`) in a subprocess and sends a
mixed load from ``--concurrency`` clients: every other request lets the backbone answer (``POST
/score`` with a prompt alone, a generation of up to ``--max-new-tokens`` tokens), the others score a
given answer (``POST /score`` with a ~40-token ``response``: one teacher-forced pass).  It prints
p50 / p95 of each kind's latency, then (``--soak N``) sends N more mixed requests and prints the
service's resident memory (RSS of the ``spanuq serve`` process; the llama.cpp server it manages is
a separate process, reported beside it) at the start, half-way and the end, and its slope over
the second half (MiB per 1,000 requests).  "Before" figures: run this file from a checkout of the
commit before the lanes (f190584) — it only drives the CLI and HTTP.  Say the machine's load
beside the numbers.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import httpx
import psutil

from bench_serve import percentile, start_service  # benchmarks/bench_serve.py: the same service, started alike
from table import report  # benchmarks/table.py: make bench's one table

ANSWER = ("It was first described in the early nineteenth century by a French chemist, who named it after "
          "the Greek word for violet; it is used today in medicine and photography.")


def bodies(n: int) -> list[tuple[str, dict]]:
    from spanuq.data.prompts import load_bundled

    prompts = [p.text for p in load_bundled()]
    out = []
    for i in range(n):
        p = prompts[i % len(prompts)]
        out.append(("generate", {"prompt": p}) if i % 2 == 0 else ("given", {"prompt": p, "response": ANSWER}))
    return out


async def run(url: str, work: list[tuple[str, dict]], concurrency: int, on_done=None) -> dict[str, list[float]]:
    """Send ``work`` from ``concurrency`` clients; the latency of each request by kind (errors under "error")."""
    lat: dict[str, list[float]] = {"generate": [], "given": [], "error": []}
    q: asyncio.Queue = asyncio.Queue()
    for w in work:
        q.put_nowait(w)

    async def client(c: httpx.AsyncClient) -> None:
        while not q.empty():
            kind, body = q.get_nowait()
            t0 = time.perf_counter()
            try:
                r = await c.post(f"{url}/score", json=body, timeout=600)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            lat[kind if ok else "error"].append(time.perf_counter() - t0)
            if on_done is not None:
                on_done()

    async with httpx.AsyncClient() as c:
        await asyncio.gather(*[client(c) for _ in range(concurrency)])
    return lat


def rss_mib(pid: int) -> tuple[float, float]:
    """(RSS of the service process, RSS of its children: the llama.cpp server) in MiB."""
    p = psutil.Process(pid)
    kids = sum(k.memory_info().rss for k in p.children(recursive=True) if k.is_running())
    return p.memory_info().rss / 2**20, kids / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="shipped")
    ap.add_argument("--requests", type=int, default=1000, help="mixed requests for the latency figures")
    ap.add_argument("--soak", type=int, default=5000, help="mixed requests for the memory figures (0: none)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    proc, url = start_service(args.model, args.max_new_tokens)
    try:
        asyncio.run(run(url, bodies(4), 2))  # warm-up: the llama.cpp server starts on the first generation
        print(f"spanuq serve ({args.model}) on loopback, load average {os.getloadavg()[0]:.2f} at the start; "
              f"{args.requests} requests, half generations (≤ {args.max_new_tokens} tokens), half given answers, "
              f"{args.concurrency} clients")
        t0 = time.perf_counter()
        lat = asyncio.run(run(url, bodies(args.requests), args.concurrency))
        wall = time.perf_counter() - t0
        for kind in ("given", "generate"):
            xs = lat[kind]
            print(f"  {kind:8s} /score: {len(xs):5d} done, p50 {statistics.median(xs) if xs else float('nan'):6.2f} s, "
                  f"p95 {percentile(xs, 0.95):6.2f} s")
        print(f"  errors: {len(lat['error'])}; {wall:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")
        report("lanes", "given-answer /score under generations", percentile(lat["given"], 0.95), "s (p95)",
               f"p50 {statistics.median(lat['given']) if lat['given'] else float('nan'):.2f} s, "
               f"{args.concurrency} clients, {len(lat['error'])} errors")
        if args.soak:
            samples: list[tuple[int, float, float]] = [(0, *rss_mib(proc.pid))]
            done = 0

            def tick() -> None:
                nonlocal done
                done += 1
                if done % max(1, args.soak // 20) == 0:
                    samples.append((done, *rss_mib(proc.pid)))
                    print(f"  {done} requests: service {samples[-1][1]:.0f} MiB, llama.cpp server "
                          f"{samples[-1][2]:.0f} MiB", flush=True)  # a long soak shows how far it is

            lat = asyncio.run(run(url, bodies(args.soak), args.concurrency, tick))
            samples.append((done, *rss_mib(proc.pid)))
            half = [s for s in samples if s[0] >= args.soak // 2]
            slope = (half[-1][1] - half[0][1]) / max(1, half[-1][0] - half[0][0]) * 1000
            print(f"RSS over {args.soak} mixed requests ({len(lat['error'])} errors): service "
                  f"{samples[0][1]:.0f} → {half[0][1]:.0f} (half-way) → {samples[-1][1]:.0f} MiB, "
                  f"{slope:+.1f} MiB per 1,000 requests over the second half; llama.cpp server "
                  f"{samples[-1][2]:.0f} MiB")
            print("  " + ", ".join(f"{n}: {r:.0f}" for n, r, _ in samples))
            report("lanes", f"service RSS after {args.soak} mixed requests", samples[-1][1], "MiB",
                   f"{slope:+.1f} MiB / 1,000 requests over the second half")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
