"""Hidden-state extraction: tokens/s of the teacher-forced pass and bytes stored per response token.

    python benchmarks/bench_extract.py [--responses 32] [--tokens 120] [--batch 8] [--dtype float16]

Builds synthetic chat prompts + responses of about ``--tokens`` tokens on the default
backbone, runs `extract_batch` (one forward pass with all hidden states, layer fusion,
token entropy) and writes the items with the real `ShardWriter`.  Prints extraction
tokens/s and the stored bytes per response token against the 2·d (fp16) target.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spanuq.config import load_config  # noqa: E402
from spanuq.features.store import ShardWriter  # noqa: E402
from spanuq.llm.loading import chat_prompt, load_backbone, response_token_ids  # noqa: E402
from spanuq.llm.presets import get_preset  # noqa: E402
from spanuq.llm.presets import fused_layers  # noqa: E402
from spanuq.llm.states import extract_batch  # noqa: E402
from table import report  # noqa: E402 - benchmarks/table.py: make bench's one table

TEXT = ("Marie Curie was a Polish and naturalised-French physicist and chemist who conducted pioneering "
        "research on radioactivity. She was the first woman to win a Nobel Prize, the first person to win "
        "a Nobel Prize twice, and the only person to win a Nobel Prize in two scientific fields. ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--responses", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=120, help="approximate response length")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(REPO / "params.yaml")
    preset = get_preset(cfg.backbone.name)
    model, tok = load_backbone(cfg)
    layers = fused_layers(cfg)
    ids = response_token_ids(tok, TEXT * (1 + args.tokens // 50))
    chats = [chat_prompt(tok, f"Question {i}: tell me about Marie Curie.", cfg.backbone.system_prompt)
             for i in range(args.responses)]
    resps = [ids[: args.tokens - (i % 7)] for i in range(args.responses)]
    out_dtype = getattr(torch, args.dtype)
    extract_batch(model, tok, chats[:1], resps[:1], layers, out_dtype)  # warm-up
    items, t0 = [], time.perf_counter()
    for s in range(0, len(chats), args.batch):
        items += extract_batch(model, tok, chats[s:s + args.batch], resps[s:s + args.batch], layers, out_dtype)
    seconds = time.perf_counter() - t0
    n_tok = sum(len(r) for r in resps)
    with tempfile.TemporaryDirectory() as d:
        w = ShardWriter(d, {"d_model": preset.d_model, "layers": layers})
        for i, it in enumerate(items):
            w.add(f"r{i}", it)
        index = w.close()
        shards = sum(p.stat().st_size for p in Path(d).glob("shard-*.safetensors"))
        index_bytes = index.stat().st_size
    d_model = preset.d_model
    print(f"backbone {cfg.backbone.name} ({cfg.backbone.dtype}, d = {d_model}, layers {layers}), "
          f"{args.threads} threads, batch {args.batch}")
    print(f"extraction: {n_tok} response tokens in {seconds:.2f} s = {n_tok / seconds:.0f} tokens/s "
          f"({seconds / len(resps) * 1e3:.0f} ms per response of ~{args.tokens} tokens)")
    print(f"storage ({args.dtype}): {shards / n_tok:.1f} bytes per response token in shards "
          f"(target 2·d = {2 * d_model} for h, + 8 for entropy and token id), "
          f"index {index_bytes / len(resps):.0f} bytes per response")
    report("extract", f"teacher-forced pass, batch {args.batch}", n_tok / seconds, "tokens/s")
    report("extract", f"stored states ({args.dtype})", shards / n_tok, "bytes/token")


if __name__ == "__main__":
    main()
