"""The default run's SpanUQ over training seeds × CPU-kernel paths: does its headline hold whatever the last bits?

For each kernel path (`backbone.cpu_kernels`: ``avx2`` pins ATen, MKL and oneDNN to their AVX2 code;
``native`` lets them use AVX-512 where the CPU has it) the features are the extract stage's under that
path: the run's own for the run's path, a second `spanuq extract` (its own cache) for the other.  Then,
for each training seed, the train and evaluate stages run as `make repro` runs them (`spanuq train`,
`spanuq evaluate`, params.yaml plus the overrides given), in a folder of their own that links the run's
prompts, generations and labels.  Prints one row per run (test span AUROC over every labelled span with
its 95% interval, the negatives, the train stage's seconds) and the surface prior of the run's
baselines stage (fitted on the same labels: neither the seed nor the kernels move it).

    python experiments/seed_spread.py data --seeds 0 1 2 --kernels avx2 native
    python experiments/seed_spread.py data --seeds 0 1 2 -o train.members=1     # one probe a run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from spanuq.config import load_config  # noqa: E402
from spanuq.metrics.uq import negatives  # noqa: E402
from spanuq.pipeline.paths import StagePaths  # noqa: E402

INPUTS = ("generations.jsonl", "generate_report.json", "claims.jsonl", "labels.jsonl", "label_report.json")


def stage(name: str, data: Path, cache: Path, overrides: list[str]) -> float:
    """Run one pipeline stage on ``data`` (its own cache and MLflow store); its wall seconds."""
    cmd = [sys.executable, "-c", "from spanuq.cli import main; main()", name, "-o", f"paths.data={data}",
           "-o", f"paths.cache={cache}", "-o", f"mlflow.tracking_uri=sqlite:///{data / 'mlflow.db'}",
           "-o", "mlflow.register_model=false", *[x for o in overrides for x in ("-o", o)]]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def linked_run(base: StagePaths, out: Path, backbone: str, features: Path | None) -> Path:
    """A data folder ``out`` whose backbone folder links ``base``'s inputs and ``features`` (if given)."""
    root = out / backbone
    root.mkdir(parents=True, exist_ok=True)
    links = {base.prompts: out / "prompts.jsonl", **({features: root / "features"} if features else {}),
             **{base.root / n: root / n for n in INPUTS if (base.root / n).exists()}}
    for src, dst in links.items():
        if not dst.exists():
            dst.symlink_to(src.resolve())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the default run's data folder (after `make repro`)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--kernels", nargs="+", default=["avx2", "native"], choices=["avx2", "native"])
    ap.add_argument("--out", type=Path, default=Path("data-seeds"), help="where the runs' folders go")
    ap.add_argument("-o", "--override", action="append", default=[], help="params.yaml override for every run")
    args = ap.parse_args()

    cfg = load_config(REPO / "params.yaml", [f"paths.data={args.data}", *args.override])
    base = StagePaths.from_config(cfg)
    name = cfg.backbone.name
    prior = json.loads((base.root / "baselines" / "metrics.json").read_text())["methods"]["surface_prior"]["span"]["auroc"]
    print(f"{args.data}: surface prior test span AUROC {prior['value']:.3f}; members "
          f"{cfg.train.members}; this CPU's kernels: run {cfg.backbone.cpu_kernels}\n")
    print("| kernels | seed | SpanUQ span AUROC | neg | pair acc | members alone | train s |\n|---|---|---|---|---|---|---|",
          flush=True)
    values = []
    for kernels in args.kernels:
        features = base.features
        if kernels != cfg.backbone.cpu_kernels:  # the features of this path: a second extract, its own cache
            feat_run = linked_run(base, args.out / f"features-{kernels}", name, None)
            features = feat_run / name / "features"
            stage("extract", feat_run, feat_run / ".cache", [*args.override, f"backbone.cpu_kernels={kernels}"])
        for seed in args.seeds:
            if (kernels, seed) == (cfg.backbone.cpu_kernels, cfg.train.seed) and not args.override:
                # the run's own probe (`make repro`'s): its metrics and its train stage's time
                metrics, seconds = base.metrics, json.loads(base.run_log("train").read_text())["seconds"]
            else:
                run = linked_run(base, args.out / f"{kernels}-seed{seed}", name, features)
                opts = [*args.override, f"backbone.cpu_kernels={kernels}", f"train.seed={seed}"]
                seconds = stage("train", run, run / ".cache", opts)
                stage("evaluate", run, run / ".cache", opts)
                metrics = run / name / "metrics.json"
            row = json.loads(metrics.read_text())["spanuq"]
            span, alone = row["span"], (row.get("members_alone") or {}).get("span_auroc") or []
            a, p = span["auroc"], span["pair_accuracy"]
            values.append(a["value"])
            print(f"| {kernels} | {seed} | {a['value']:.3f} [{a['ci'][0]:.2f}, {a['ci'][1]:.2f}] | "
                  f"{negatives(span)} | {p['value']:.3f} | "
                  f"{f'{min(alone):.3f}–{max(alone):.3f}' if alone else '–'} | {seconds:.0f} |",
                  flush=True)
    print(f"\n{len(values)} runs: min {min(values):.3f}, max {max(values):.3f}, spread {max(values) - min(values):.3f}; "
          f"min - surface prior {min(values) - prior['value']:+.3f}")


if __name__ == "__main__":
    main()
