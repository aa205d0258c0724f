"""Do Lookback-Lens attention features add to (û, S, H₀) for reading an answer against its sources?

    python scripts/grounded_lookback.py --readings data/smollm2-135m/grounded/readings-<key>.jsonl

Reads the grounded training pairs' slots (the readings `spanuq recalibrate --grounded` cached), the
lookback ratio of each slot per head (`spanuq.train.grounded_lookback`, one eager pass per twin,
cached beside the readings), fits each variant on the training subjects and prints what it reaches
on the held-out ones (`spanuq.train.grounded_calibration.held_out`): log-loss, pair accuracy by
case, right facts at û ≥ 0.5 (cases a–c) and silent ones (case d).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readings", required=True, help="the cached slot readings (.jsonl)")
    ap.add_argument("--probe", default="shipped")
    ap.add_argument("--l2", type=float, default=10.0)
    args = ap.parse_args()

    from spanuq import SpanUQ
    from spanuq.bench.grounded import TRAIN_PAIRS, read_pairs
    from spanuq.label.grounded import SlotReading
    from spanuq.model.calibration import clipped_logit
    from spanuq.pipeline.files import iter_jsonl
    from spanuq.train.grounded_calibration import evaluate, fit, held_out, measure
    from spanuq.train.grounded_lookback import fit_logistic, lookback_ratios, predict_logistic

    readings = [SlotReading(**r) for r in iter_jsonl(args.readings)]
    pairs = read_pairs(TRAIN_PAIRS)
    cache = Path(args.readings).with_suffix(".lookback.npz")
    if cache.exists():
        x = np.load(cache)["x"]
    else:
        with SpanUQ.load(args.probe) as uq:
            x, keys = lookback_ratios(uq, pairs)
        assert keys == [(r.pair, r.twin) for r in readings], "readings and pairs are not in the same order"
        np.savez(cache, x=x)
    y = np.array([r.label for r in readings])
    base = np.c_[clipped_logit(np.array([r.u_raw for r in readings])), [r.surprisal for r in readings],
                 [r.entropy for r in readings]]
    val = np.array([held_out(r.group) for r in readings])
    fit_r = [r for r, v in zip(readings, val) if not v]
    val_r = [r for r, v in zip(readings, val) if v]
    out = {"validation subjects": len({r.group for r in val_r}),
           "platt (û)": evaluate(fit("platt", fit_r), val_r),
           "surprisal (û, S, H₀)": evaluate(fit("surprisal", fit_r), val_r)}
    for name, feats in (("lookback", x), ("lookback + û, S, H₀", np.c_[x, base]), ("logistic û, S, H₀", base)):
        m = fit_logistic(feats[~val], y[~val], args.l2)
        out[name] = measure(val_r, predict_logistic(m, feats[val]))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
