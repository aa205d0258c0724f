"""What streaming scoring costs: time to first span, latency per update, tokens/s with and without it.

    python benchmarks/bench_stream.py [--model shipped] [--n 6] [--max-new-tokens 64] [--threads 1]

For each of --n bundled prompts, every variant runs once, in turn (interleaved, so that load
changes on a shared machine hit all alike):

  * ``generate``: transformers ``model.generate`` greedy, nothing captured (the answer alone);
  * ``stream k=K``: `SpanUQ.score_stream` on the transformers path (``hf``), re-scoring every K
    tokens (``+clauses``: and at each clause end; the default is k=8 +clauses); k=999 re-scores
    only at the end (capture alone);
  * ``2nd pass``: ``generate`` + one teacher-forced pass over the same answer + the probe
    (what `score(prompt)` costs when the states are not captured during generation);
  * ``llama.cpp`` / ``llama.cpp stream``: the managed llama.cpp server generating alone
    (``stream: false``), and streaming with the states read as the text arrives.

Printed per variant: tokens, tokens/s (generated tokens / wall time of the whole call, scoring
included), slowdown vs generating alone on the same path, updates per answer, mean seconds per
update (the re-score: tokenising, probe, post-processing; on the llama.cpp path also reading the
new tokens), the share of the wall time spent in updates (the added cost, less noisy than the
tok/s ratio on a loaded machine), and the time to the first update with a span.  The order of
the variants is reversed on every other prompt.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from probes import scoring_setup  # benchmarks/probes.py
from table import report  # benchmarks/table.py: make bench's one table

VARIANTS = ["generate", "stream k=1", "stream k=4", "stream k=8 +clauses", "stream k=16", "stream k=999",
            "2nd pass", "llama.cpp", "llama.cpp stream"]


def main() -> None:
    args, cfg = scoring_setup(argparse.ArgumentParser(), n=6, threads=1, model="shipped")

    from spanuq import SpanUQ
    from spanuq.data.prompts import load_bundled
    from spanuq.llm.loading import count_tokens
    from spanuq.llm.states import extract_batch
    from spanuq.model.postprocess import predict

    prompts = [p.text for p in load_bundled()[: args.n + 1]]
    rows: dict[str, list[dict]] = {v: [] for v in VARIANTS}

    def stream(uq, p, gen, every, clauses):
        t0 = time.perf_counter()
        ups = list(uq.score_stream(p, generator=gen, every=every, at_clauses=clauses))
        wall = time.perf_counter() - t0
        first = next((u.elapsed_s for u in ups if u.result.spans), None)
        return {"tokens": ups[-1].n_generated, "wall": wall, "updates": len(ups),
                "update_s": statistics.mean(u.update_s for u in ups), "scoring_s": sum(u.update_s for u in ups),
                "first_span_s": first}

    with SpanUQ.load(args.model, cfg=cfg) as uq:
        uq.generator = "llamacpp"
        uq.score(prompts[0])  # warm-up: starts the llama.cpp server, first-call allocations
        list(uq.score_stream(prompts[0], generator="hf", every=4))
        for i, p in enumerate(prompts[1:]):
            chat, _ = uq._chat(p)
            enc = uq.tok(chat, return_tensors="pt", add_special_tokens=False)
            for v in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:  # llama.cpp's prompt cache favours the second
                if v in ("generate", "2nd pass"):
                    t0 = time.perf_counter()
                    with torch.inference_mode():
                        out = uq.model.generate(**enc, max_new_tokens=args.max_new_tokens, do_sample=False,
                                                temperature=None, top_p=None, top_k=None, pad_token_id=uq.tok.pad_token_id)
                    ids = out[0, enc["input_ids"].shape[1]:].tolist()
                    ids = ids[: ids.index(uq.tok.eos_token_id)] if uq.tok.eos_token_id in ids else ids
                    if v == "2nd pass":
                        item = extract_batch(uq.model, uq.tok, [chat], [ids], uq.layers, uq.out_dtype)[0]
                        predict(uq.probe, [item], uq.calibration)
                    rows[v].append({"tokens": len(ids), "wall": time.perf_counter() - t0})
                elif v == "llama.cpp":
                    t0 = time.perf_counter()
                    text = uq.generation.client().greedy([chat])[0].text
                    rows[v].append({"tokens": count_tokens(uq.tok, text),
                                    "wall": time.perf_counter() - t0})
                elif v == "llama.cpp stream":
                    rows[v].append(stream(uq, p, "llamacpp", cfg.score.stream_every, True))
                else:
                    k = int(v.split("k=")[1].split()[0])
                    rows[v].append(stream(uq, p, "hf", k, "+clauses" in v))

    def tps(v):
        return sum(r["tokens"] for r in rows[v]) / sum(r["wall"] for r in rows[v])

    load = os.getloadavg()
    print(f"{args.n} bundled prompts, max_new_tokens {args.max_new_tokens}, {args.threads} torch thread(s), "
          f"llama.cpp {args.threads} thread(s), probe {args.model}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'variant':<22} {'tokens':>7} {'tok/s':>7} {'vs alone':>9} {'updates':>8} {'s/update':>9} "
          f"{'scoring %':>10} {'1st span s':>11}")
    for v in VARIANTS:
        base = "llama.cpp" if v.startswith("llama.cpp") else "generate"
        r = rows[v]
        upd = (f"{statistics.mean(x['updates'] for x in r):8.1f} {statistics.mean(x['update_s'] for x in r):9.4f} "
               f"{100 * sum(x['scoring_s'] for x in r) / sum(x['wall'] for x in r):9.1f}%") \
            if "updates" in r[0] else f"{'-':>8} {'-':>9} {'-':>10}"
        firsts = [x["first_span_s"] for x in r if x.get("first_span_s") is not None]
        first = f"{statistics.mean(firsts):11.2f}" if firsts else f"{'-':>11}"
        print(f"{v:<22} {statistics.mean(x['tokens'] for x in r):7.1f} {tps(v):7.1f} "
              f"{100 * (tps(base) / tps(v) - 1):+8.1f}% {upd} {first}")
        report("stream", v, tps(v), "tok/s", f"first span {statistics.mean(firsts):.2f} s" if firsts else "")


if __name__ == "__main__":
    main()
