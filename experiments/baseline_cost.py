"""Cost of every baseline per test answer on this machine, against SpanUQ (one teacher-forced pass + probe).

    python experiments/baseline_cost.py [--methods selfcheck_nli,p_true] [--cost-answers 3] [-o key=value ...]

Needs a finished pipeline run up to `train` (data/<backbone>/ with generations,
labels, features and the probe).  Runs the selected methods exactly as the
`baselines` stage does, re-times greedy + S-sample decoding with the configured
backend on ``--cost-answers`` test answers, and prints seconds per answer (added
and end to end), forward passes, generated tokens and NLI calls per answer, and
the SelfCheckGPT-NLI / SpanUQ ratio.  Writes nothing.
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from spanuq.baselines.context import AnswerContext
from spanuq.baselines.cost import time_decoding, time_spanuq
from spanuq.baselines.stage import Shared, add_costs, run_method, spanuq_vs_selfcheck
from spanuq.config import load_config
from spanuq.features.dataset import load_examples
from spanuq.llm.loading import resolve_device
from spanuq.model.checkpoint import load_checkpoint
from spanuq.pipeline.paths import StagePaths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default=None, help="comma-separated (default: baselines.methods)")
    ap.add_argument("--cost-answers", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--override", action="append", default=[])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg = load_config("params.yaml", args.override)
    methods = args.methods.split(",") if args.methods else cfg.baselines.methods
    n_cost = cfg.baselines.cost_answers if args.cost_answers is None else args.cost_answers
    paths = StagePaths.from_config(cfg)
    train, dev, test = (load_examples(paths.features, paths.labels, (s,)) for s in ("train", "dev", "test"))
    context = AnswerContext.load(cfg)
    infos = context.for_examples(test)
    shared = Shared(cfg, context)
    rows = {m: run_method(m, cfg, shared, train, dev, test)[0] for m in methods}
    device = resolve_device(cfg.train.device)
    ckpt = load_checkpoint(paths.probe, device)
    model, tok = shared.backbone()
    cost = {"spanuq": time_spanuq(cfg, model, tok, ckpt.probe, ckpt.calibration, test, infos, device),
            "decoding": time_decoding(cfg, infos[:n_cost]) if n_cost else {}}
    add_costs(rows, cost, float(np.mean([sum(i.sample_tokens) for i in infos])), cfg.generate.n_samples)
    su, dec = cost["spanuq"], cost["decoding"]
    print(f"{cfg.backbone.name}: {len(test)} test answers, S = {cfg.generate.n_samples}, "
          f"{args.threads} threads; decoding ({dec.get('backend')}, {dec.get('n_answers')} answers): "
          f"greedy {dec.get('greedy_seconds_per_answer') or 0:.2f} s, samples {dec.get('samples_seconds_per_answer') or 0:.2f} s")
    print(f"{'method':<18} {'added s':>9} {'e2e s':>9} {'passes':>8} {'gen tok':>8} {'NLI':>6}")
    print(f"{'spanuq':<18} {su['seconds_per_answer']:>9.3f} "
          f"{su['seconds_per_answer'] + (dec.get('greedy_seconds_per_answer') or 0):>9.3f} {1:>8} {0:>8} {0:>6}")
    for m, r in rows.items():
        c = r["cost"]
        f = lambda k, d=3: "–" if c.get(k) is None else f"{c[k]:.{d}f}"  # noqa: E731
        print(f"{m:<18} {f('added_seconds_per_answer'):>9} {f('end_to_end_seconds_per_answer'):>9} "
              f"{f('forward_passes_per_answer', 1):>8} {f('generated_tokens_per_answer', 1):>8} "
              f"{f('nli_calls_per_answer', 1):>6}")
    r = spanuq_vs_selfcheck(cost, rows.get("selfcheck_nli"))
    if r.get("end_to_end") is not None:
        print(f"SpanUQ / SelfCheckGPT-NLI: {r['end_to_end']:.3f} end to end "
              f"({r['selfcheck_over_spanuq_end_to_end']:.1f}x cheaper), {r['added']:.3f} added "
              f"({r['selfcheck_over_spanuq_added']:.1f}x cheaper)")


if __name__ == "__main__":
    main()
