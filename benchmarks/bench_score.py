"""What `score(prompt)` costs beyond generating the answer, both ways of getting hidden states.

    python benchmarks/bench_score.py [--model data/smollm2-135m/probe] [--n 8] [--max-new-tokens 64]

For each of --n bundled prompts, interleaved so that load changes hit both alike:
  * llamacpp: generate with the llama.cpp server (the GGUF) + one teacher-forced pass + probe;
  * hf:       transformers greedy generation capturing the hidden states + probe, and the same
              generation without capture (the "answer alone" baseline for this path).
Prints per-path means and the ratios the issue asks for:
  probe overhead = probe time / the backbone's generation time of the same answer;
  end-to-end     = score(prompt) time / generating the answer alone (same generator).
Without --model a random-weight probe of the configured size is used (timings do not depend
on the weights).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from probes import probe_or_random, scoring_setup  # benchmarks/probes.py
from table import report  # benchmarks/table.py: make bench's one table


def main() -> None:
    args, cfg = scoring_setup(argparse.ArgumentParser(), n=8, threads=2)

    from spanuq import SpanUQ
    from spanuq.data.prompts import load_bundled

    model = probe_or_random(args.model, cfg)
    prompts = [p.text for p in load_bundled()[: args.n]]
    rows: dict[str, list[dict]] = {"llamacpp": [], "hf": [], "hf_plain": []}
    with SpanUQ.load(model, cfg=cfg) as uq:
        uq.score(prompts[0])  # warm-up: starts the llama.cpp server, first-call allocations
        for p in prompts:
            for gen in ("llamacpp", "hf"):
                uq.generator = gen
                r = uq.score(p)
                t = r.timings
                rows[gen].append({"tokens": r.n_tokens, "gen": t.generate_s, "bb": t.backbone_s, "probe": t.probe_s,
                                  "total": t.total_s})
            chat, _ = uq._chat(p)  # the same greedy generation, no capture
            enc = uq.tok(chat, return_tensors="pt", add_special_tokens=False)
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = uq.model.generate(**enc, max_new_tokens=args.max_new_tokens, do_sample=False, temperature=None,
                                        top_p=None, top_k=None, pad_token_id=uq.tok.pad_token_id)
            rows["hf_plain"].append({"tokens": out.shape[1] - enc["input_ids"].shape[1],
                                     "gen": time.perf_counter() - t0})

    def mean(path, key):
        return statistics.mean(r[key] for r in rows[path])

    print(f"{args.n} bundled prompts, max_new_tokens {args.max_new_tokens}, {args.threads} threads, "
          f"probe {sum(p.numel() for p in uq.probe.parameters()) / 1e6:.2f}M params")
    print(f"{'path':<10} {'tokens':>7} {'generate s':>11} {'tok/s':>7} {'2nd pass s':>11} {'probe s':>8} {'total s':>8}")
    for path in ("llamacpp", "hf"):
        tok, gen = mean(path, "tokens"), mean(path, "gen")
        print(f"{path:<10} {tok:7.1f} {gen:11.3f} {tok / gen:7.1f} {mean(path, 'bb'):11.3f} {mean(path, 'probe'):8.4f} "
              f"{mean(path, 'total'):8.3f}")
        report("score", f"score(prompt), {path}, ~{tok:.0f}-token answers", mean(path, "total"), "s")
    tok, gen = mean("hf_plain", "tokens"), mean("hf_plain", "gen")
    print(f"{'hf plain':<10} {tok:7.1f} {gen:11.3f} {tok / gen:7.1f} {'-':>11} {'-':>8} {'-':>8}")
    print()
    for path in ("llamacpp", "hf"):
        ratios = [r["probe"] / r["gen"] for r in rows[path]]
        print(f"probe overhead / {path} generation of the same answer: {100 * statistics.mean(ratios):.2f}% "
              f"(max {100 * max(ratios):.2f}%)")
        report("score", f"probe / generation, {path}", 100 * statistics.mean(ratios), "%")
    print(f"score(prompt) / llama.cpp generation alone: {mean('llamacpp', 'total') / mean('llamacpp', 'gen'):.3f}x")
    print(f"score(prompt) / transformers generation alone (hf capture vs plain): "
          f"{mean('hf', 'total') / mean('hf_plain', 'gen'):.3f}x")
    print(f"score(prompt), llamacpp path / hf capture path: {mean('llamacpp', 'total') / mean('hf', 'total'):.3f}x "
          f"(the faster is the default: score.generator)")


if __name__ == "__main__":
    main()
