"""Decode rate of the in-process llama.cpp generator by batch width (`generate.llamacpp_slots`).

K samples of one prompt, K slots, no stop string and a fixed budget: every step decodes K tokens
in one ``llama_decode``, so the rate is that of a K-wide batch (sequences that hit the end of
their answer early drop out, as they do in the stage).

    python experiments/llamacpp_batch.py --widths 1,6,12,24,48 --tokens 128
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spanuq.config import load_config  # noqa: E402
from spanuq.generate.llamacpp import LlamaCppGenerator  # noqa: E402
from spanuq.llm.loading import chat_prompt, load_tokenizer  # noqa: E402

PROMPT = ("Tell me about the history of the Roman Empire and its main emperors, the fall of the western "
          "empire in 476 and what happened to the eastern half afterwards.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="1,6,12,24,48")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}  threads: {args.threads or os.cpu_count()}  tokens per sequence: {args.tokens}")
    for k in map(int, args.widths.split(",")):
        cfg = load_config(REPO / "params.yaml", [
            "generate.backend=llamacpp", f"generate.llamacpp_slots={k}", "generate.stop=[]",
            f"generate.sample_max_new_tokens={args.tokens}", f"generate.max_new_tokens={args.tokens}",
            *([f"generate.llamacpp_threads={args.threads}"] if args.threads else [])])
        chat = chat_prompt(load_tokenizer(cfg), PROMPT, cfg.backbone.system_prompt)
        gen = LlamaCppGenerator(cfg)
        try:
            gen.sample([chat], 1, [1])  # warm-up
            t = time.perf_counter()
            out = gen.sample([chat], k, [0])[0]
            dt = time.perf_counter() - t
            n = sum(len(gen.tokenize(c.text)) for c in out)
        finally:
            gen.close()
        print(f"width {k:3d}: {n:6d} tokens in {dt:6.2f} s = {n / dt:6.1f} tok/s")


if __name__ == "__main__":
    main()
