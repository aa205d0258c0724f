"""Generation throughput of each backend on the default backbone, and the wall time
of the default prompts + generate stages.

    python benchmarks/bench_generate.py --prompts 16 --samples 5 --max-new-tokens 128 --backends llamacpp,server
    python benchmarks/bench_generate.py --pipeline   # also time `spanuq prompts && spanuq generate` on the defaults
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spanuq.config import load_config  # noqa: E402
from spanuq.generate.base import greedy_and_samples  # noqa: E402
from spanuq.generate.stage import open_generator, prompt_seed  # noqa: E402
from spanuq.llm.loading import chat_prompt, count_tokens, load_tokenizer  # noqa: E402
from table import report  # noqa: E402 - benchmarks/table.py: make bench's one table

QUESTIONS = [
    "What is the capital of Australia?", "Who discovered penicillin?", "Tell me a bio of Marie Curie.",
    "Why is the sky blue?", "When did the Berlin Wall fall?", "Who wrote the opera Carmen?",
    "What is the largest moon of Saturn?", "How do vaccines work?", "Tell me about Ada Lovelace.",
    "What is the boiling point of water at sea level?",
]


def bench(cfg, n_prompts: int, n_samples: int) -> dict:
    tok = load_tokenizer(cfg)
    chats = [chat_prompt(tok, QUESTIONS[i % len(QUESTIONS)], cfg.backbone.system_prompt) for i in range(n_prompts)]
    n_tok = lambda cs: sum(count_tokens(tok, c.text) for c in cs)  # noqa: E731
    with open_generator(cfg) as gen:
        gen.greedy(chats[:1])  # warm-up
        t = time.perf_counter()
        greedy = gen.greedy(chats)
        tg = time.perf_counter() - t
        t = time.perf_counter()
        samples = gen.sample(chats, n_samples, [prompt_seed(0, str(i)) for i in range(n_prompts)])
        ts = time.perf_counter() - t
        t = time.perf_counter()  # what the generate stage calls: both at once where the backend can
        g2, s2 = greedy_and_samples(gen, chats, n_samples, [prompt_seed(1, str(i)) for i in range(n_prompts)])
        tb = time.perf_counter() - t
    gt, st = n_tok(greedy), n_tok([c for cs in samples for c in cs])
    bt = n_tok(g2 + [c for cs in s2 for c in cs])
    return {"greedy_tok_s": gt / tg, "greedy_s_per_prompt": tg / n_prompts,
            "sample_tok_s": st / ts, "samples_s_per_prompt": ts / n_prompts,
            "both_tok_s": bt / tb, "both_s_per_prompt": tb / n_prompts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--backends", default="llamacpp,server,hf,vllm")
    ap.add_argument("--pipeline", action="store_true", help="time the default prompts+generate stages too")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"backbone: smollm2-135m  prompts: {args.prompts}  S: {args.samples}  max_new_tokens: {args.max_new_tokens}"
          f"  cpus: {os.cpu_count()}")
    for backend in args.backends.split(","):
        over = [f"generate.backend={backend}", f"generate.max_new_tokens={args.max_new_tokens}",
                f"generate.launch_server={'true' if backend == 'server' else 'false'}"]
        if backend == "vllm" and not torch.cuda.is_available():
            print(f"{backend:>7}: skipped (needs a CUDA GPU and `pip install 'spanuq[gpu]'`)")
            continue
        r = bench(load_config(REPO / "params.yaml", over), args.prompts, args.samples)
        label = {"server": "llama.cpp server", "llamacpp": "llama.cpp in-process, batched"}.get(backend, backend)
        print(f"{backend:>7}: greedy {r['greedy_tok_s']:6.1f} tok/s ({r['greedy_s_per_prompt']:.2f} s/prompt); "
              f"{args.samples} samples {r['sample_tok_s']:6.1f} tok/s ({r['samples_s_per_prompt']:.2f} s/prompt); "
              f"both as the stage asks {r['both_tok_s']:6.1f} tok/s ({r['both_s_per_prompt']:.2f} s/prompt)  [{label}]")
        report("generate", f"{label}: greedy answer", r["greedy_tok_s"], "tok/s")
        report("generate", f"{label}: greedy + {args.samples} samples", r["both_tok_s"], "tok/s")
    if args.pipeline:
        with tempfile.TemporaryDirectory() as tmp:
            over = ["-o", f"paths.data={tmp}/data", "-o", f"paths.cache={tmp}/cache"]
            t = time.perf_counter()
            for stage in ("prompts", "generate"):
                subprocess.run([sys.executable, "-m", "spanuq.cli", stage, "--no-progress", *over], cwd=REPO, check=True)
            print(f"default prompts+generate wall time: {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
