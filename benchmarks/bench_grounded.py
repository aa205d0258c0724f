"""What scoring an answer against sources costs: the same answer scored with ~2,000 tokens of sources and
without, both ways an answer arrives.

    python benchmarks/bench_grounded.py [--model shipped] [--n 4] [--context-tokens 2000] [--threads 2]

For each of --n pasted answers (spanuq/bench/planted/pasted.jsonl, timing only), interleaved so that load
changes hit both alike:
  * given:     score(prompt, response)              vs  score(prompt, response, context=sources)
  * generated: score(prompt) (the backbone answers) vs  score(prompt, context=sources)
The sources are other pasted answers, as many as make --context-tokens tokens.  Prints the mean time of
each and the ratio with / without (the target: <= 2x on 2 cores).  Without --model a random probe of the
configured size is used (timings do not depend on the weights).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from probes import probe_or_random  # benchmarks/probes.py
from table import report  # benchmarks/table.py: make bench's one table

PASTED = Path(__file__).resolve().parents[1] / "spanuq" / "bench" / "planted" / "pasted.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="probe (default: a random probe of params.yaml's size)")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--context-tokens", type=int, default=2000)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from spanuq import SpanUQ
    from spanuq.config import load_config

    cfg = load_config("params.yaml", [f"score.max_new_tokens={args.max_new_tokens}",
                                      f"score.server_threads={args.threads}"])
    model = probe_or_random(args.model, cfg)
    rows = [json.loads(line) for line in PASTED.read_text(encoding="utf-8").splitlines() if line.strip()]
    times: dict[str, list[float]] = {k: [] for k in ("given", "given+context", "generated", "generated+context")}
    n_ctx = []
    with SpanUQ.load(model, cfg=cfg) as uq:
        for i, row in enumerate(rows[: args.n]):
            sources, n_tok = [], 0
            for other in rows[i + 1:] + rows[:i]:
                if n_tok >= args.context_tokens:
                    break
                sources.append(other["answer"])
                n_tok += len(uq.tok(other["answer"], add_special_tokens=False)["input_ids"])
            n_ctx.append(n_tok)
            if i == 0:  # warm-up: the llama.cpp server, first-call allocations, spaCy
                uq.score(row["prompt"], context=sources)
                uq.score(row["prompt"], response=row["answer"], context=sources)
            for key, kw in (("given", {"response": row["answer"]}),
                            ("given+context", {"response": row["answer"], "context": sources}),
                            ("generated", {}), ("generated+context", {"context": sources})):
                times[key].append(uq.score(row["prompt"], **kw).timings.total_s)

    print(f"{args.n} answers, ~{statistics.mean(n_ctx):.0f} tokens of sources, {args.threads} threads")
    for key, ts in times.items():
        print(f"{key:<18} mean {statistics.mean(ts):7.3f} s   (min {min(ts):.3f}, max {max(ts):.3f})")
    for kind in ("given", "generated"):
        ratio = statistics.mean(times[f"{kind}+context"]) / statistics.mean(times[kind])
        print(f"{kind} answer, with / without sources: {ratio:.2f}x (target <= 2x)")
        report("grounded", f"score, {kind} answer, ~{args.context_tokens} tokens of sources / none", ratio, "x")


if __name__ == "__main__":
    main()
