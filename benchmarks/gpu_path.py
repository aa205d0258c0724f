"""The GPU path on one card in minutes: extraction and probe training at the paper's shapes, each stage in a
process of its own, and the card's memory back between them.

    python benchmarks/gpu_path.py                  # CUDA: Qwen3-14B's shapes, random weights, bf16
    python benchmarks/gpu_path.py --dry-run        # CPU: the same stages on the shapes scaled down (seconds)

Made for a borrowed card (one H100, no model hub, minutes): nothing is downloaded and no model is written to
disk.  Each stage runs as the Prefect pipeline runs one, through `spanuq.pipeline.child.run_in_child`:

* ``extract``: the backbone built on the card with random weights from ``spanuq/llm/architectures.yaml``
  (timings and memory depend on shapes, not weights), then the extract stage's own code
  (`teacher_forced_ids` + `feature_items`, the preset's fused layers) over ``--answers`` answers of
  ``--tokens`` tokens after ``--prompt`` prompt tokens, ``extract.batch_size`` (16) at a time; the features
  go to ``--out`` for the next stage;
* ``train``: the gpu-paper probe (the paper's sizes) trained on those features with random labelled spans:
  ``--steps`` AdamW steps at ``train.batch_size`` (16), detection-only steps then joint ones, as the
  two-phase schedule runs them.

Per stage one row: its seconds, throughput, the peak CUDA memory its process allocated
(``torch.cuda.max_memory_allocated``) beside the estimate of `spanuq.llm.memory`, what it still held
after dropping its model and `release_memory` (``torch.cuda.memory_allocated``: the path for callers that
keep their process), and the card's used memory (``nvidia-smi``) before the stage's process started and
after it ended — this process never touches CUDA, so the last two show the card handed back.  Exits 1 when
a stage's memory was not released.  ``--dry-run`` scales every shape down (`DRY_RUN`) and runs on the CPU
(memory columns "-"): tests/test_gpu_script.py runs it in the default suite.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GIB = 2 ** 30
RELEASED_GIB = 0.5  # what a stage may still hold after release (allocator slack), and the card after it
# the paper's: 17,494 answers of up to 512 tokens at batch 16; here a few batches of full-length answers
PAPER = {"answers": 64, "prompt": 128, "tokens": 512, "steps": 40}
# --dry-run: the same stages on a backbone and probe a CPU runs in seconds
DRY_RUN = {"answers": 8, "prompt": 12, "tokens": 24, "steps": 4}
DRY_ARCH = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "intermediate_size": 128, "vocab_size": 512}
DRY_PROBE = {"d_proj": 32, "n_queries": 8, "n_heads": 4, "d_ffn": 64}


def stage_arch(plan: dict):
    """The backbone's shapes; a dry run's scaled down (a mixture of experts keeps 4 small experts)."""
    from spanuq.llm.shapes import architectures

    a = architectures()[plan["backbone"]]
    if not plan["dry_run"]:
        return a
    experts = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32} if a.num_experts else {}
    return replace(a, **DRY_ARCH, **experts)


def fused_layers(plan: dict, n_layers: int) -> list[int]:
    """The preset's fused layers, mapped onto a scaled-down depth for a dry run."""
    from spanuq.llm.presets import get_preset

    preset = get_preset(plan["backbone"])
    if not plan["dry_run"]:
        return list(preset.layers)
    return sorted({max(1, round(layer * n_layers / preset.n_layers)) for layer in preset.layers})


class Memory:
    """This process's CUDA memory, in GiB (None off CUDA)."""

    def __init__(self, device: str):
        import torch

        self.cuda = device == "cuda"
        self.torch = torch
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def allocated(self) -> float | None:
        return self.torch.cuda.memory_allocated() / GIB if self.cuda else None

    def peak(self) -> float | None:
        return self.torch.cuda.max_memory_allocated() / GIB if self.cuda else None


def extract_stage(cfg, plan: dict) -> dict:
    """In its own process: a random-weight backbone on the device, teacher-forced passes over random answers
    (the extract stage's code), the features saved for ``train``, the backbone dropped and released."""
    import torch

    from spanuq.llm.loading import release_memory
    from spanuq.llm.memory import extract_peak_gib
    from spanuq.llm.shapes import random_backbone
    from spanuq.llm.states import feature_items, teacher_forced_ids

    dev, B = plan["device"], cfg.extract.batch_size if not plan["dry_run"] else 4
    mem = Memory(dev)
    a = stage_arch(plan)
    t0 = time.perf_counter()
    model = random_backbone(a, dev, "bfloat16" if dev == "cuda" else "float32")
    mem.sync()
    built_s, weights = time.perf_counter() - t0, mem.allocated()
    layers = fused_layers(plan, a.num_hidden_layers)
    g = torch.Generator().manual_seed(0)
    n, P, T = plan["answers"], plan["prompt"], plan["tokens"]
    prompts = [torch.randint(0, a.vocab_size, (P,), generator=g).tolist() for _ in range(n)]
    answers = [torch.randint(0, a.vocab_size, (T - i % 7,), generator=g).tolist() for i in range(n)]
    feature_items(teacher_forced_ids(model, prompts[:1], answers[:1], 0, layers), answers[:1])  # warm-up
    mem.sync()
    t0 = time.perf_counter()
    items = []
    for i in range(0, n, B):
        items += feature_items(teacher_forced_ids(model, prompts[i:i + B], answers[i:i + B], 0, layers),
                               answers[i:i + B], torch.bfloat16)
    mem.sync()
    seconds = time.perf_counter() - t0
    torch.save({"h": [it.h for it in items], "entropy": [it.entropy for it in items]}, plan["features"])
    peak = mem.peak()
    del model, items
    release_memory()
    tokens = sum(len(x) for x in answers)
    return {"stage": "extract", "device": torch.cuda.get_device_name() if dev == "cuda" else "CPU",
            "what": f"{plan['backbone']}{' (scaled)' if plan['dry_run'] else ''}, d = {a.hidden_size}, layers "
                    f"{layers}, {n} answers x {T} tokens after {P}, batch {B}",
            "seconds": round(built_s + seconds, 1), "rate": f"{tokens / seconds:,.0f} answer tokens/s",
            "weights_gib": weights, "peak_gib": peak, "after_release_gib": mem.allocated(),
            "estimate_gib": None if plan["dry_run"] else extract_peak_gib(a, 1, B, P + T, T)}


def _batches(feats: dict, B: int, device: str, g) -> list[tuple]:
    """The saved features as padded probe batches (h, entropy, mask, lengths) with random labelled spans."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    from benchmarks.bench_gpu import synthetic_targets

    out = []
    for i in range(0, len(feats["h"]), B):
        hs, es = feats["h"][i:i + B], feats["entropy"][i:i + B]
        lengths = torch.tensor([len(h) for h in hs])
        mask = torch.arange(int(lengths.max()))[None] < lengths[:, None]
        out.append((pad_sequence([h.float() for h in hs], batch_first=True).to(device),
                    pad_sequence(es, batch_first=True).to(device), mask.to(device), lengths.to(device),
                    synthetic_targets(len(hs), device, g)))
    return out


def train_stage(cfg, plan: dict) -> dict:
    """In its own process: the gpu-paper probe trained on the extracted features (AdamW, the paper's batch;
    detection-only steps, then joint), then dropped and released."""
    import torch

    from spanuq.llm.loading import release_memory
    from spanuq.model.losses import SetCriterion
    from spanuq.model.matcher import HungarianMatcher
    from spanuq.model.probe import SpanUQProbe

    dev = plan["device"]
    mem = Memory(dev)
    feats = torch.load(plan["features"])
    d = feats["h"][0].shape[-1]
    pcfg = cfg.probe.model_copy(update=DRY_PROBE) if plan["dry_run"] else cfg.probe
    torch.manual_seed(0)
    probe = SpanUQProbe(pcfg, d).to(dev).train()
    crit = SetCriterion(cfg.loss, HungarianMatcher.from_config(cfg.loss))
    opt = torch.optim.AdamW(probe.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    B = cfg.train.batch_size if not plan["dry_run"] else 4
    batches = _batches(feats, B, dev, torch.Generator().manual_seed(1))

    def step(k: int) -> None:
        h, e, m, lengths, targets = batches[k % len(batches)]
        loss, _ = crit(probe(h, e, m, lengths), targets, phase="warmup" if k < plan["steps"] // 2 else "joint")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(probe.parameters(), cfg.train.grad_clip)
        opt.step()

    step(0)  # warm-up
    mem.sync()
    t0 = time.perf_counter()
    for k in range(plan["steps"]):
        step(k)
    mem.sync()
    per_step = (time.perf_counter() - t0) / plan["steps"]
    peak, n_params = mem.peak(), probe.num_parameters()
    del probe, opt, crit, batches
    release_memory()
    epochs = cfg.train.warmup_epochs + cfg.train.joint_epochs
    run_h = -(-17494 // B) * per_step * epochs / 3600
    rate = f"{per_step * 1e3:.0f} ms a step"
    if not plan["dry_run"]:
        rate += f" ({epochs} epochs on 17,494 answers, no early stop: {run_h:.2f} h)"
    return {"stage": "train", "what": f"gpu-paper probe{' (scaled)' if plan['dry_run'] else ''}, "
                                      f"{n_params / 1e6:.2f}M parameters, d = {d}, batch {B}, {plan['steps']} steps",
            "seconds": round(per_step * plan["steps"], 1), "rate": rate,
            "weights_gib": None, "peak_gib": peak, "after_release_gib": mem.allocated(), "estimate_gib": None}


def card_used_gib() -> float | None:
    """The card's used memory (``nvidia-smi``: every process's), GiB; None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return int(out.stdout.split()[0]) / 1024 if out.returncode == 0 and out.stdout.strip() else None


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[dict]) -> str:
    head = (f"{'stage':<8} {'seconds':>8} {'process s':>9} {'weights':>8} {'peak':>8} {'estimate':>8} "
            f"{'released':>8} {'card before':>11} {'card after':>10}  (GiB)")
    lines = [head]
    for r in rows:
        lines.append(f"{r['stage']:<8} {r['seconds']:>8.1f} {r['process_s']:>9.1f} {_gib(r['weights_gib']):>8} "
                     f"{_gib(r['peak_gib']):>8} {_gib(r['estimate_gib']):>8} {_gib(r['after_release_gib']):>8} "
                     f"{_gib(r['card_before_gib']):>11} {_gib(r['card_after_gib']):>10}")
    lines += [f"  {r['stage']}: {r['what']}; {r['rate']}" for r in rows]
    return "\n".join(lines)


def released(r: dict) -> bool:
    """The stage's process held nothing after its release, and the card came back when it ended."""
    held = r["after_release_gib"] is not None and r["after_release_gib"] > RELEASED_GIB
    card = None not in (r["card_before_gib"], r["card_after_gib"]) and \
        r["card_after_gib"] - r["card_before_gib"] > RELEASED_GIB
    return not (held or card)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="qwen3-14b", help="a preset of spanuq/llm/architectures.yaml")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, every shape scaled down")
    for k, v in PAPER.items():
        ap.add_argument(f"--{k}", type=int, default=None, help=f"default {v} ({DRY_RUN[k]} in a dry run)")
    ap.add_argument("--out", default="/tmp/spanuq-gpu-path")
    args = ap.parse_args(argv)

    from spanuq.config import load_config
    from spanuq.pipeline.child import run_in_child

    if args.dry_run:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # the stages' processes: tiny shapes, no thread pool to spin
    else:
        import torch

        if not torch.cuda.is_available():
            print("gpu_path: no CUDA device here (--dry-run: the same stages on the CPU, shapes scaled down)",
                  file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = DRY_RUN if args.dry_run else PAPER
    plan = {k: getattr(args, k) or v for k, v in sizes.items()} | {
        "backbone": args.backbone, "dry_run": args.dry_run, "device": "cpu" if args.dry_run else "cuda",
        "features": str(out / "features.pt")}
    cfg = load_config(REPO / "params.yaml", [f"backbone.name={args.backbone}", f"paths.data={out / 'data'}",
                                             f"paths.cache={out / 'cache'}"], preset="gpu-paper")
    rows = []
    for stage in ("extract", "train"):
        before, t0 = card_used_gib(), time.perf_counter()
        r = run_in_child(f"benchmarks.gpu_path:{stage}_stage", cfg, {"plan": plan})
        rows.append(r | {"process_s": time.perf_counter() - t0, "card_before_gib": before,
                         "card_after_gib": card_used_gib()})
    print(f"gpu_path on {rows[0]['device']}: {args.backbone}, random weights, each stage in its own process")
    print(table(rows))
    (out / "gpu_path.json").write_text(json.dumps({"plan": plan, "stages": rows}, indent=2))
    kept = [r["stage"] for r in rows if not released(r)]
    if kept:
        print(f"gpu_path: memory not released after {', '.join(kept)}", file=sys.stderr)
    return 1 if kept else 0


if __name__ == "__main__":
    raise SystemExit(main())
