"""What scoring an answer against sources costs: the same answer scored with ~2,000 tokens of sources and
without, both ways an answer arrives, with sources never read before (cold) and with sources an earlier
answer was read against (warm).

    python benchmarks/bench_grounded.py [--model shipped] [--n 4] [--repeats 2] [--context-tokens 2000] [--threads 2] [--set K=V]

For each of --n pasted answers (spanuq/bench/planted/pasted.jsonl, timing only) and each repeat, the
variants of one answer run one after another, their order reversed every other time, so that load changes
hit all alike; a ratio is taken within each such round and the median over rounds is reported:
  * given:     score(prompt, response)               vs  score(prompt, response, context=sources)
  * generated: score(prompt) (the backbone answers)  vs  score(prompt, context=sources)
  * cold: sources no earlier call read (new ones in every round); warm: another question and answer about
    the sources just read (the backbone's KV cache of them is kept, ``score.prefix_cache``; docs/context.md).
The sources are other pasted answers, as many as make --context-tokens tokens, read as the product reads them:
all of them.  With ``--model shipped`` (make bench) the probe's with-sources reader reads them (MiniLM over every
source sentence; the backbone writes its own answer after all of them); without --model a random probe of the
configured size, with no reader, reads the answer after the sources with the backbone (timings do not depend on
the weights).  The target: <= 2x on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from probes import probe_or_random, scoring_setup  # benchmarks/probes.py
from table import report  # benchmarks/table.py: make bench's one table

PASTED = Path(__file__).resolve().parents[1] / "spanuq" / "bench" / "planted" / "pasted.jsonl"


def sources(uq, rows: list[dict], start: int, n_tokens: int) -> tuple[list[str], int]:
    """Pasted answers from ``start`` on (wrapping), as many as make ``n_tokens`` tokens."""
    from spanuq.llm.loading import count_tokens

    out, n = [], 0
    for other in rows[start:] + rows[:start]:
        if n >= n_tokens:
            break
        out.append(other["answer"])
        n += count_tokens(uq.tok, other["answer"])
    return out, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--context-tokens", type=int, default=2000)
    args, cfg = scoring_setup(ap, n=4, threads=2)

    from spanuq import SpanUQ

    model = probe_or_random(args.model, cfg)
    rows = [json.loads(line) for line in PASTED.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds = [f"{k} {v}" for k in ("given", "generated") for v in ("none", "cold", "warm")]
    ratios: dict[str, list[float]] = {k: [] for k in kinds if not k.endswith("none")}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    n_ctx, offset = [], 1

    def timed(uq, key, prompt, response, context):
        t0 = time.perf_counter()
        uq.score(prompt, **({"response": response} if response else {}), **({"context": context} if context else {}))
        times[key].append(time.perf_counter() - t0)
        return times[key][-1]

    with SpanUQ.load(model, cfg=cfg) as uq:
        warm_up, _ = sources(uq, rows, len(rows) - 3, args.context_tokens)  # the llama.cpp server, allocations, spaCy
        uq.score(rows[0]["prompt"], context=warm_up)
        uq.score(rows[0]["prompt"], response=rows[0]["answer"], context=warm_up)
        for r in range(args.repeats):
            for i, row in enumerate(rows[: args.n]):
                other = rows[(i + args.n) % len(rows)]  # the warm call: another question and answer, same sources
                for kind in ("given", "generated") if (r + i) % 2 == 0 else ("generated", "given"):
                    ctx, n = sources(uq, rows, (i + offset) % len(rows), args.context_tokens)
                    offset += 7  # other sources in the next round: cold stays cold
                    n_ctx.append(n)
                    answer = row["answer"] if kind == "given" else None
                    calls = {"none": (row["prompt"], answer, None), "cold": (row["prompt"], answer, ctx),
                             "warm": (other["prompt"], other["answer"] if kind == "given" else None, ctx)}
                    order = ["none", "cold", "warm"] if (r + i) % 2 == 0 else ["cold", "warm", "none"]
                    got = {v: timed(uq, f"{kind} {v}", *calls[v]) for v in order}  # warm right after cold
                    for v in ("cold", "warm"):
                        ratios[f"{kind} {v}"].append(got[v] / got["none"])

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.n} answers x {args.repeats} repeats, ~{statistics.mean(n_ctx):.0f} tokens of sources, "
          f"{args.threads} threads; load average after: {load}")
    for key, ts in times.items():
        print(f"{key:<16} median {statistics.median(ts):7.3f} s   (min {min(ts):.3f}, max {max(ts):.3f})")
    for key, rs in ratios.items():
        kind, how = key.split()
        print(f"{kind} answer, with / without sources, {how}: median {statistics.median(rs):.2f}x "
              f"(of {len(rs)} interleaved rounds, {min(rs):.2f}-{max(rs):.2f}; target <= 2x)")
        report("grounded", f"score, {kind} answer, ~{args.context_tokens} tokens of sources ({how}) / none",
               statistics.median(rs), "x", f"median of {len(rs)} interleaved ratios; load {load}")


if __name__ == "__main__":
    main()
