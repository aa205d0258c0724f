"""Would an ensemble of probes help?  Members one by one, then their û averaged, on one run's labels.

Each probe (trained on the run's labels, e.g. with other ``train.seed`` values) scores every
labelled span of the chosen split by the evaluate stage's rule (`spanuq.evaluate.scoring`);
the ensemble's score of a span is the mean of its members' calibrated û (members 1..n, in
the order given).  Prints AUROC / pair accuracy / ECE with 95% intervals and the negatives.
One backbone pass serves every member; each member adds its probe's cost (small beside the
backbone's).  Choose the number of members on ``--split dev``; read test once.

    python experiments/ensemble.py DATA_DIR PROBE [PROBE ...] --split dev
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from spanuq.config import load_config  # noqa: E402


def row(name: str, y: np.ndarray, s: np.ndarray, groups: np.ndarray, bootstrap: int) -> str:
    from spanuq.metrics.uq import negatives, span_metrics

    m = span_metrics(y, s, groups=groups, bootstrap=bootstrap)

    def cell(k: str) -> str:
        ci = m[k].get("ci")
        return f"{m[k]['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    return f"| {name} | {cell('auroc')} | {negatives(m)} | {cell('pair_accuracy')} | {cell('ece')} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the run's data folder (features + labels.jsonl)")
    ap.add_argument("probes", nargs="+", type=Path, help="probe folders (model.safetensors + config.json)")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--preset", default=None, help="the run's preset (e.g. cpu-full)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()

    import torch

    from spanuq.evaluate.stage import evaluate_probe
    from spanuq.features.dataset import answers, load_examples
    from spanuq.llm.loading import load_tokenizer
    from spanuq.model.checkpoint import load_checkpoint
    from spanuq.pipeline.paths import StagePaths
    from spanuq.score.windows import window_length

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_config(REPO / "params.yaml", overrides=[f"paths.data={args.data}"], preset=args.preset)
    paths = StagePaths.from_config(cfg)
    examples = load_examples(paths.features, paths.labels, (args.split,))
    texts = answers(load_tokenizer(cfg), examples)
    groups = np.concatenate([[i] * len(e.u) for i, e in enumerate(examples)])
    y, members = None, []
    print(f"{args.split} split of {args.data}: {len(examples)} answers, {len(groups)} labelled spans\n")
    print("| probe | span AUROC | neg | pair acc | ECE |\n|---|---|---|---|---|")
    for p in args.probes:
        ck = load_checkpoint(p, "cpu")
        _, _, sc = evaluate_probe(cfg, ck.probe, ck.calibration, examples, "cpu", texts,
                                  window=window_length(ck.extra, cfg.generate.max_new_tokens))
        y = np.asarray(sc["u_true"])
        members.append(np.asarray(sc["u"]))
        print(row(str(p), y, members[-1], groups, args.bootstrap), flush=True)
    for n in range(2, len(members) + 1):
        print(row(f"mean û of probes 1..{n}", y, np.mean(members[:n], axis=0), groups, args.bootstrap))


if __name__ == "__main__":
    main()
