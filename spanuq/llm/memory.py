"""GPU memory per backbone and stage, computed from the model configs (``architectures.yaml``).

    python -m spanuq.llm.memory            # the tables of docs/gpu.md (Markdown)

Estimates of the peak a stage holds on one card, bf16 weights (2 bytes a parameter):

* parameters: embeddings V·d (twice unless tied) + per layer attention d·(H + 2·KV)·h_d + H·h_d·d and an
  MLP 3·d·I (MoE: E experts of 3·d·I_moe and a d·E router); norms are left out (< 0.01%);
* ``generate`` (vLLM, ``tensor_parallel_size`` = n): vLLM takes ``gpu_memory_utilization`` u of each card;
  weights W/n and ``VLLM_OVERHEAD_GIB`` (CUDA context, the profiling step's activations, CUDA graphs) come
  out of it and the rest is KV cache: 2·layers·KV·h_d·2 bytes a token, split over min(n, KV) ranks.
  Sequences decoded at once = KV budget / (KV a token · ``max_model_len``); the stage needs >= 1, and
  S + 1 (a prompt's greedy answer and its samples together) keeps the batches full;
* ``extract`` (transformers, ``backbone.device_map`` over n cards, batch B of ``max_model_len`` tokens):
  W/n, the hidden states of every layer (L+1)·B·T·d·2 / n, and on the card holding the head the logits
  B·T·V·2, one answer's float32 log-softmax and probabilities 2·T_a·V·4 and an MLP's activations B·T·I·2·2,
  plus ``TORCH_OVERHEAD_GIB``;
* ``baselines``: the backbone as ``extract`` at batch 1 plus the asking methods' batches (8 prompts of 256
  tokens) and an NLI model (``NLI_GIB``, DeBERTa-large in fp32); decoding is timed in its own process
  (as ``generate``), before the backbone loads;
* ``train``: the probe alone (27M parameters, AdamW in fp32): under 2 GiB on any card.

These are estimates (activations, allocator slack and CUDA graphs vary with versions): the settings
in docs/gpu.md leave a margin, and `benchmarks/gpu_path.py` measures the real peaks on a lent device.
"""
from __future__ import annotations

import argparse
import math

from .shapes import Arch, architectures

GIB = 1024 ** 3
BYTES = 2  # bf16
VLLM_OVERHEAD_GIB = 3.0
TORCH_OVERHEAD_GIB = 1.0
NLI_GIB = 1.6
CARDS_GIB = (24, 40, 80)
GPUS = (1, 2, 4, 8)
BATCHES = (16, 8, 4, 2, 1)


def n_params(a: Arch) -> int:
    d, hd = a.hidden_size, a.head_dim
    attn = d * (a.num_attention_heads + 2 * a.num_key_value_heads) * hd + a.num_attention_heads * hd * d
    if a.num_experts:
        mlp = a.num_experts * 3 * d * a.moe_intermediate_size + d * a.num_experts
    else:
        mlp = 3 * d * a.intermediate_size
    return a.vocab_size * d * (1 if a.tie_word_embeddings else 2) + a.num_hidden_layers * (attn + mlp)


def weights_gib(a: Arch) -> float:
    return n_params(a) * BYTES / GIB


def kv_bytes_per_token(a: Arch) -> int:
    return 2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim * BYTES


def vllm_sequences(a: Arch, card_gib: float, gpus: int, max_model_len: int, utilization: float = 0.85,
                   enforce_eager: bool = False) -> int:
    """Sequences of ``max_model_len`` tokens vLLM can hold at once with ``tensor_parallel_size`` = gpus."""
    budget = utilization * card_gib - weights_gib(a) / gpus - VLLM_OVERHEAD_GIB + (1.0 if enforce_eager else 0.0)
    per_seq = kv_bytes_per_token(a) / min(gpus, a.num_key_value_heads) * max_model_len / GIB
    return max(0, math.floor(budget / per_seq))


def extract_peak_gib(a: Arch, gpus: int, batch: int, tokens: int, answer_tokens: int) -> float:
    """The card holding the LM head, teacher-forced over ``batch`` sequences of ``tokens``."""
    d, v = a.hidden_size, a.vocab_size
    inter = a.moe_intermediate_size * a.num_experts_per_tok if a.num_experts else a.intermediate_size
    hidden = (a.num_hidden_layers + 1) * batch * tokens * d * BYTES / gpus
    head = batch * tokens * v * BYTES + 2 * answer_tokens * v * 4 + batch * tokens * inter * BYTES * 2
    return weights_gib(a) / gpus + (hidden + head) / GIB + TORCH_OVERHEAD_GIB


def baselines_peak_gib(a: Arch, gpus: int, tokens: int, answer_tokens: int) -> float:
    asking = 8 * 256 * a.vocab_size * BYTES / GIB
    return extract_peak_gib(a, gpus, 1, tokens, answer_tokens) + asking + NLI_GIB


def fewest_gpus(fits) -> int | None:
    return next((n for n in GPUS if fits(n)), None)


def _card_table(title: str, archs: list[Arch], cell) -> list[str]:
    """One row per backbone, one column per card size: ``cell(arch, card_gib)`` (None: not on 8 GPUs)."""
    out = ["", title, "", "| backbone | " + " | ".join(f"{c} GB cards" for c in CARDS_GIB) + " |",
           "|---|" + "---|" * len(CARDS_GIB)]
    for a in archs:
        out.append(f"| {a.name} | " + " | ".join(cell(a, c) or "does not fit on 8" for c in CARDS_GIB) + " |")
    return out


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n > 1 else ''}"


def tables(max_model_len: int = 1536, answer_tokens: int = 512, n_samples: int = 20, utilization: float = 0.85,
           names: list[str] | None = None) -> str:
    """docs/gpu.md's tables (Markdown)."""
    archs = [a for n, a in architectures().items() if names is None or n in names]
    out = [f"Estimates for `max_model_len` = {max_model_len} (prompt 1024 + answer {answer_tokens} tokens), "
           f"`gpu_memory_utilization` = {utilization}, bf16.", "",
           "| backbone | parameters | bf16 weights | KV cache a token | a {}-token sequence |".format(max_model_len),
           "|---|---:|---:|---:|---:|"]
    for a in archs:
        kv = kv_bytes_per_token(a)
        out.append(f"| {a.name} | {n_params(a) / 1e9:.2f}B | {weights_gib(a):.1f} GiB | {kv / 1024:.0f} KiB | "
                   f"{kv * max_model_len / GIB:.2f} GiB |")

    def generate(a: Arch, c: int) -> str | None:
        n = fewest_gpus(lambda n: vllm_sequences(a, c, n, max_model_len, utilization) >= n_samples + 1)
        return n and f"{_gpus(n)}: {vllm_sequences(a, c, n, max_model_len, utilization)} seqs"

    def extract(a: Arch, c: int) -> str | None:
        n = fewest_gpus(lambda n: extract_peak_gib(a, n, 1, max_model_len, answer_tokens) <= c)
        if n is None:
            return None
        b = next(b for b in BATCHES if extract_peak_gib(a, n, b, max_model_len, answer_tokens) <= c)
        return f"{_gpus(n)}, batch {b} ({extract_peak_gib(a, n, b, max_model_len, answer_tokens):.0f} GiB)"

    def baselines(a: Arch, c: int) -> str | None:
        n = fewest_gpus(lambda n: baselines_peak_gib(a, n, max_model_len, answer_tokens) <= c)
        return n and f"{_gpus(n)} ({baselines_peak_gib(a, n, max_model_len, answer_tokens):.0f} GiB)"

    out += _card_table("**generate** (vLLM): fewest GPUs (`generate.vllm.tensor_parallel_size`) per card, and the "
                       f"sequences decoded at once there (>= {n_samples + 1}: a prompt's greedy answer and its "
                       f"{n_samples} samples together)", archs, generate)
    out += _card_table("**extract** (transformers, `backbone.device_map: auto` over the GPUs when more than one): "
                       "fewest GPUs per card and the largest `extract.batch_size` that fits there", archs, extract)
    out += _card_table("**baselines** (the backbone in transformers, the asking methods, an NLI model): fewest GPUs "
                       "per card (decoding is timed in its own process before, as generate)", archs, baselines)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spanuq.llm.memory", description=__doc__.split("\n")[0])
    ap.add_argument("--max-model-len", type=int, default=1536)
    ap.add_argument("--answer-tokens", type=int, default=512)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--utilization", type=float, default=0.85)
    args = ap.parse_args(argv)
    print(tables(args.max_model_len, args.answer_tokens, args.samples, args.utilization), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
