"""What a long given answer costs in `SpanUQ.score(prompt, response=...)`.

    python benchmarks/bench_long_speed.py [--tokens 128,2000,10000] [--threads 1] [--repeats 1]

For each length, an answer of at least that many tokens (the shipped probe's labelled test
answers joined by blank lines) is scored with the shipped probe; prints tokens, windows,
backbone passes (one, or chunked past the context), backbone_s, probe_s and total_s (the
fastest of --repeats), and the time per 1,000 answer tokens.
"""
from __future__ import annotations

import argparse
import json

import torch
from table import report  # benchmarks/table.py: make bench's one table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="128,2000,10000")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from spanuq import SpanUQ
    from spanuq.llm.chunked import chunk_plan
    from spanuq.llm.loading import count_tokens
    from spanuq.score.shipped import shipped_dir

    uq = SpanUQ.load("shipped", generator="hf")
    with open(shipped_dir(uq.backbone_name) / "test_split.jsonl") as f:
        parts = [json.loads(line)["response"] for line in f if line.strip()]
    prompt = "Answer many questions."
    _, n_prompt = uq._chat(prompt)
    print("| answer tokens | windows | backbone passes | backbone s | probe s | total s | s per 1k tokens |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(x) for x in args.tokens.split(",")):
        text, k = "", 0
        while count_tokens(uq.tok, text) < n:
            text += ("\n\n" if text else "") + parts[k % len(parts)]
            k += 1
        best = min((uq.score(prompt, response=text) for _ in range(args.repeats)), key=lambda r: r.timings.total_s)
        passes = len(chunk_plan(n_prompt, best.n_tokens, uq.max_context)) if uq.max_context else 1
        t = best.timings
        print(f"| {best.n_tokens:,} | {best.windows} | {passes} | {t.backbone_s:.2f} | {t.probe_s:.2f} | "
              f"{t.total_s:.2f} | {1000 * t.total_s / best.n_tokens:.2f} |", flush=True)
        report("long answer", f"score a given {best.n_tokens:,}-token answer ({best.windows} windows)", t.total_s, "s")


if __name__ == "__main__":
    main()
