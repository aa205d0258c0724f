"""Probe size and speed: parameters and per-response forward time, against backbone generation.

    python benchmarks/bench_probe.py [--tokens 300] [--repeats 10] [--threads 2] [--skip-backbone]
                                     [--train-batch 8] [--train-tokens 64] [--train-answers 60]

Measures, on CPU with batch 1 under ``torch.inference_mode`` after warm-up:
  * the paper-size probe (ProbeConfig defaults, d = 5120 as for Qwen3-14B);
  * the CPU default probe (``params.yaml`` probe section, d = the default backbone's d_model),
    and the same probe with its set-decoder options off (the paper's set decoder: learned
    queries, no reference spans, no denoising), before / after;
  * one training step (forward + loss + backward + AdamW) of those CPU probes on a batch of
    ``--train-batch`` answers of ``--train-tokens`` tokens, and the epoch time it implies for
    ``--train-answers`` answers (the default run has 60);
  * the default backbone's greedy generation of a ~T-token answer (and, for reference,
    one teacher-forced forward pass over the same tokens), and the probe / generation ratio.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from spanuq.config import LossConfig, ProbeConfig, load_config
from spanuq.llm.presets import get_preset
from spanuq.model.losses import SetCriterion
from spanuq.model.probe import SpanUQProbe
from table import report  # benchmarks/table.py: make bench's one table

# the paper's set decoder: reference spans, denoising and query selection off (ProbeConfig keeps the rest)
PAPER_DECODER = {"seq_weighting": "paper", "query_selection": "learned", "refine": False, "dn_groups": 0}

REPO = Path(__file__).resolve().parents[1]


def time_probe(cfg: ProbeConfig, d_model: int, T: int, repeats: int) -> tuple[int, float, float]:
    """(parameters, mean seconds, stdev seconds) of one batch-1 forward pass at length T."""
    torch.manual_seed(0)
    model = SpanUQProbe(cfg, d_model).eval()
    h = torch.randn(1, T, d_model)
    ent = torch.rand(1, T)
    mask = torch.ones(1, T, dtype=torch.bool)
    lengths = torch.tensor([T])
    times = []
    with torch.inference_mode():
        for _ in range(2):  # warm-up
            model(h, ent, mask, lengths)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(h, ent, mask, lengths)
            times.append(time.perf_counter() - t0)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    return model.num_parameters(), statistics.mean(times), sd


def time_train_step(cfg: ProbeConfig, loss_cfg: LossConfig, d_model: int, B: int, T: int,
                    repeats: int) -> tuple[float, float]:
    """(mean, stdev) seconds of one training step on B random answers of T tokens with 4 spans each."""
    torch.manual_seed(0)
    model = SpanUQProbe(cfg, d_model).train()
    criterion = SetCriterion(loss_cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    h, ent = torch.randn(B, T, d_model), torch.rand(B, T)
    mask, lengths = torch.ones(B, T, dtype=torch.bool), torch.full((B,), T)
    spans = torch.tensor([[0.05, 0.15], [0.3, 0.4], [0.55, 0.6], [0.8, 0.95]])
    targets = [{"spans": spans, "u": torch.rand(4), "u_seq": torch.tensor(0.5)} for _ in range(B)]
    times = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        out = model(h, ent, mask, lengths, targets=targets)
        loss, _ = criterion(out, targets, phase="joint", lengths=lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i:  # the first step is warm-up
            times.append(time.perf_counter() - t0)
    return statistics.mean(times), statistics.stdev(times) if len(times) > 1 else 0.0


def time_backbone(T: int) -> tuple[str, float, float, int]:
    """(name, greedy generation seconds for T new tokens, teacher-forced forward seconds, tokens)."""
    from spanuq.llm.loading import chat_prompt, load_backbone

    cfg = load_config(None)
    cfg.backbone.device = "cpu"
    model, tok = load_backbone(cfg)
    prompt = chat_prompt(tok, "Write a detailed biography of Marie Curie.", cfg.backbone.system_prompt)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    kwargs = dict(do_sample=False, pad_token_id=tok.pad_token_id)
    with torch.inference_mode():
        model.generate(**ids, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(**ids, max_new_tokens=T, min_new_tokens=T, **kwargs)
        gen_s = time.perf_counter() - t0
        n_new = out.shape[1] - ids["input_ids"].shape[1]
        t0 = time.perf_counter()
        model(out, output_hidden_states=True)
        fwd_s = time.perf_counter() - t0
    return cfg.backbone.name, gen_s, fwd_s, n_new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=300, help="response length T")
    ap.add_argument("--repeats", type=int, default=10, help="timed probe forward passes")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--skip-backbone", action="store_true", help="only time the probes")
    ap.add_argument("--train-batch", type=int, default=8, help="answers per training step")
    ap.add_argument("--train-tokens", type=int, default=64, help="answer length in the training step")
    ap.add_argument("--train-answers", type=int, default=60, help="training answers per epoch")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    T = args.tokens

    default = load_config(REPO / "params.yaml")
    d_default = get_preset(default.backbone.name).d_model
    rows = [("paper (Qwen3-14B shapes)", ProbeConfig(), 5120),
            ("cpu default, paper decoder", default.probe.model_copy(update=PAPER_DECODER), d_default),
            (f"cpu default ({default.backbone.name})", default.probe, d_default)]
    print(f"torch {torch.__version__}, {args.threads} CPU threads, batch 1, T = {T}, {args.repeats} repeats")
    results = []
    for name, cfg, d in rows:
        n, mean, sd = time_probe(cfg, d, T, args.repeats)
        results.append((name, mean))
        print(f"probe {name:32s} d={d:5d} d_p={cfg.d_proj:4d} N={cfg.n_queries:3d}: "
              f"{n / 1e6:7.2f}M params, forward {mean * 1e3:8.1f} ms ± {sd * 1e3:.1f} per response")
        report("probe", f"forward, {name}, T = {T}", mean * 1e3, "ms")
    steps = -(-args.train_answers // args.train_batch)
    for name, cfg, d in rows[1:]:
        mean, sd = time_train_step(cfg, default.loss, d, args.train_batch, args.train_tokens, max(3, args.repeats // 2))
        print(f"train step {name:27s} B={args.train_batch} T={args.train_tokens}: {mean * 1e3:8.1f} ms ± "
              f"{sd * 1e3:.1f}; epoch of {args.train_answers} answers ≈ {mean * steps:.2f} s")
        report("probe", f"train step, {name}, B = {args.train_batch}", mean * 1e3, "ms")
    if args.skip_backbone:
        return
    name, gen_s, fwd_s, n_new = time_backbone(T)
    print(f"backbone {name}: greedy generation of {n_new} tokens {gen_s:.2f} s "
          f"({gen_s / max(n_new, 1) * 1e3:.1f} ms/token); one teacher-forced forward pass {fwd_s * 1e3:.0f} ms")
    for pname, mean in results:
        print(f"ratio probe [{pname}] / {name} generation: {mean / gen_s:.2%}   "
              f"(/ forward pass: {mean / fwd_s:.1%})")
        report("probe", f"probe / generation, {pname}", 100 * mean / gen_s, "%")


if __name__ == "__main__":
    main()
