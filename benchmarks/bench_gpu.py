"""SpanUQ at the paper's shapes on a GPU: backbone generation and extraction, probe inference and training.

    python benchmarks/bench_gpu.py [--backbone qwen3-14b] [--tokens 300] [--batch 16]

The backbone is built with random weights from its architecture (no download: the
timings depend on shapes, not on weights), in bf16 on the GPU.  Measured, after warm-up:

  * greedy generation of T new tokens at batch 1 with transformers ``generate``
    (vLLM's paged attention and CUDA graphs are faster; this is the in-process path);
  * teacher-forced extraction (`teacher_forced_ids` + `feature_items`, the extract stage's own code)
    at batch B: response tokens/s, bytes stored per token, peak GPU memory;
  * the paper-size probe (ProbeConfig defaults): forward time per response at batch 1,
    throughput at batch B, the UCIR overhead and the probe / generation ratio;
  * one training step at batch B (forward, Hungarian matching, all losses, backward,
    AdamW), fp32 and with TF32 matmuls, and from it the time of one 15 + 25-epoch run
    on 17,494 answers and of a 28-configuration sweep (without early stopping).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanuq.config import LossConfig, ProbeConfig  # noqa: E402
from spanuq.llm.presets import get_preset  # noqa: E402
from spanuq.llm.shapes import architectures  # noqa: E402
from spanuq.llm.states import feature_items, teacher_forced_ids  # noqa: E402
from spanuq.model.losses import SetCriterion  # noqa: E402
from spanuq.model.matcher import HungarianMatcher  # noqa: E402
from spanuq.model.probe import SpanUQProbe  # noqa: E402

def random_backbone(name: str, device: str):
    from spanuq.llm.shapes import random_backbone as build

    preset = get_preset(name)
    model = build(name, device, "bfloat16")
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (preset.d_model, preset.n_layers), name
    return model, preset


def cuda_time(fn, repeats: int) -> tuple[float, float]:
    """Mean and stdev seconds of fn() over `repeats` calls, synchronised, after one warm-up."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.mean(times), (statistics.stdev(times) if len(times) > 1 else 0.0)


def synthetic_targets(B: int, device: str, g: torch.Generator) -> list[dict]:
    """3–10 random labelled spans per response, as the matcher and the losses read them (normalised
    (b, e), u, u_seq)."""
    targets = []
    for _ in range(B):
        K = int(torch.randint(3, 11, (1,), generator=g))
        b = torch.rand(K, generator=g) * 0.9
        w = 0.02 + torch.rand(K, generator=g) * 0.08
        u = torch.rand(K, generator=g)
        targets.append({"spans": torch.stack([b, (b + w).clamp(max=1.0)], -1).to(device), "u": u.to(device),
                        "u_seq": u.mean().to(device)})
    return targets


def synthetic_batch(B: int, T: int, d: int, device: str, seed: int = 0):
    """Fused states, entropy, mask, lengths and 3–10 random labelled spans per response."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T * 3 // 4, T + 1, (B,), generator=g)
    Tm = int(lengths.max())
    h = torch.randn(B, Tm, d, generator=g)
    ent = torch.rand(B, Tm, generator=g)
    mask = torch.arange(Tm)[None] < lengths[:, None]
    return h.to(device), ent.to(device), mask.to(device), lengths.to(device), synthetic_targets(B, device, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", default="qwen3-14b", choices=sorted(set(architectures()) - {"smollm2-135m"}))
    ap.add_argument("--tokens", type=int, default=300, help="response length T")
    ap.add_argument("--prompt-tokens", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--train-answers", type=int, default=17494)
    ap.add_argument("--sweep-configs", type=int, default=28)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_gpu.py needs a CUDA GPU (benchmarks/bench_probe.py is the CPU benchmark)")
    dev = "cuda"
    T, B, P = args.tokens, args.batch, args.prompt_tokens
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__}")

    # --- backbone: generation and extraction -------------------------------------------
    model, preset = random_backbone(args.backbone, dev)
    n_bb = sum(p.numel() for p in model.parameters())
    print(f"backbone {args.backbone} (random weights, bf16): {n_bb / 1e9:.2f}B params, d = {preset.d_model}, "
          f"fused layers {list(preset.layers)}")
    g = torch.Generator().manual_seed(1)
    V = model.config.vocab_size
    prompt = torch.randint(0, V, (1, P), generator=g).to(dev)

    def generate():
        return model.generate(prompt, max_new_tokens=T, min_new_tokens=T, do_sample=False, pad_token_id=0)

    with torch.inference_mode():
        gen_s, gen_sd = cuda_time(generate, max(1, args.repeats // 2))
    print(f"generation (transformers, batch 1): {T} tokens in {gen_s:.2f} s ± {gen_sd:.2f} "
          f"= {T / gen_s:.1f} tok/s")

    prompts = [torch.randint(0, V, (P,), generator=g).tolist() for _ in range(B)]
    resps = [torch.randint(0, V, (T - (i % 7),), generator=g).tolist() for i in range(B)]
    layers = list(preset.layers)
    torch.cuda.reset_peak_memory_stats()
    items = []

    def extract():
        items[:] = feature_items(teacher_forced_ids(model, prompts, resps, 0, layers), resps, torch.bfloat16)

    ext_s, _ = cuda_time(extract, args.repeats)
    n_tok = sum(len(r) for r in resps)
    item_bytes = sum(it.h.numel() * it.h.element_size() + it.entropy.numel() * 4 + it.token_ids.numel() * 4
                     for it in items)
    print(f"extraction (batch {B}, prompt {P} + response ~{T} tokens): {n_tok / ext_s:,.0f} response tokens/s "
          f"({ext_s / B * 1e3:.1f} ms per response), {item_bytes / n_tok:,.0f} bytes/token "
          f"(2·d = {2 * preset.d_model}), peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    del model, items
    torch.cuda.empty_cache()

    # --- probe: inference ---------------------------------------------------------------
    d = preset.d_model
    pcfg, lcfg = ProbeConfig(), LossConfig()
    torch.manual_seed(0)
    probe = SpanUQProbe(pcfg, d).to(dev).eval()
    print(f"probe (paper shapes: d_p = {pcfg.d_proj}, N = {pcfg.n_queries}, d_ffn = {pcfg.d_ffn}): "
          f"{probe.num_parameters() / 1e6:.2f}M params")
    h1, e1, m1, l1, _ = synthetic_batch(1, T, d, dev)
    hB, eB, mB, lB, tB = synthetic_batch(B, T, d, dev)
    with torch.inference_mode():
        p1, p1sd = cuda_time(lambda: probe(h1, e1, m1, l1), args.repeats * 4)
        pB, _ = cuda_time(lambda: probe(hB, eB, mB, lB), args.repeats * 4)
    print(f"probe forward, batch 1: {p1 * 1e3:.2f} ms ± {p1sd * 1e3:.2f} per response; "
          f"batch {B}: {pB / B * 1e3:.2f} ms per response ({B / pB:,.0f} responses/s)")
    no_ucir = SpanUQProbe(pcfg.model_copy(update={"ucir": False}), d).to(dev).eval()
    with torch.inference_mode():
        p0, _ = cuda_time(lambda: no_ucir(h1, e1, m1, l1), args.repeats * 4)
        p0B, _ = cuda_time(lambda: no_ucir(hB, eB, mB, lB), args.repeats * 4)
    print(f"UCIR overhead (vs the same probe without the second decoder round): batch 1 {p1 / p0 - 1:.0%} "
          f"(kernel-launch bound), batch {B} {pB / p0B - 1:.0%}")
    print(f"ratio probe (batch 1) / {args.backbone} generation of {T} tokens: {p1 / gen_s:.3%}; "
          f"/ extraction per response: {p1 / (ext_s / B):.1%}")

    # --- probe: training ----------------------------------------------------------------
    steps = -(-args.train_answers // B)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.manual_seed(0)
        probe = SpanUQProbe(pcfg, d).to(dev).train()
        crit = SetCriterion(lcfg, HungarianMatcher.from_config(lcfg))
        opt = torch.optim.AdamW(probe.parameters(), lr=1e-4, weight_decay=0.01)
        torch.cuda.reset_peak_memory_stats()

        def step():
            loss, _ = crit(probe(hB, eB, mB, lB), tB, phase="joint")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(probe.parameters(), 1.0)
            opt.step()

        s_step, s_sd = cuda_time(step, args.repeats * 2)
        epoch_s = steps * s_step
        run_s = 40 * epoch_s
        print(f"training step ({'TF32' if tf32 else 'fp32'}, batch {B}, joint phase): {s_step * 1e3:.1f} ms ± "
              f"{s_sd * 1e3:.1f}, peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB → "
              f"epoch on {args.train_answers:,} answers {epoch_s / 60:.1f} min, 40 epochs {run_s / 3600:.2f} h, "
              f"{args.sweep_configs}-config sweep {args.sweep_configs * run_s / 3600:.1f} GPU-h "
              f"(before early stopping and dev evaluation)")


if __name__ == "__main__":
    main()
