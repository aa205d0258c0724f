"""Which answer score û_seq of a given answer separates right answers from wrong ones: the probe's
own û_seq (calibrated) against aggregations of the answer's shown spans' calibrated û.

    python scripts/given_answer_score.py [--dev 200] [--probe shipped]

Candidates, each a function of one scored result (`spanuq.score.answer_score` has the chosen one):

* ``probe``: the probe's û_seq, mapped by the calibration (what `score` returned before);
* ``max``: the most doubtful shown span's û;
* ``noisy_or``: 1 − Π (1 − û_k) over the shown spans (the chance at least one is wrong, were they
  independent);
* ``mean``: the shown spans' mean û.

Two sets, each scored through the public API as given answers (`SpanUQ.score_many`):

* **dev-like** (where the rule is chosen): templated answers to the bundled *training* prompts
  (`spanuq.monitor.sample.templated_rows`): the prompt's reference (right) or another prompt's
  reference of the same domain (wrong); AUROC of each candidate, wrong against right;
* **pasted** (the planted bench's pasted answers, read once the rule is chosen): each of 120
  pairs, one answer with one fact swapped for a wrong value and the same answer without;
  pair accuracy (planted above correct, ties ½) with the number of pairs, and AUROC over the twins.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanuq.metrics.uq import rank_auroc  # noqa: E402


def candidates(r) -> dict[str, float]:
    us = [s.u for s in r.spans]
    return {"probe": float(r.u_seq),
            "max": max(us, default=0.0),
            "noisy_or": 1.0 - math.prod(1.0 - u for u in us),
            "mean": float(np.mean(us)) if us else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", type=int, default=200, help="templated answers to bundled prompts (dev-like)")
    ap.add_argument("--pasted", type=int, default=None, help="pasted pairs (default: all)")
    ap.add_argument("--probe", default="shipped")
    args = ap.parse_args()

    from spanuq import SpanUQ
    from spanuq.bench.planted import pasted_pairs
    from spanuq.monitor.sample import templated_rows

    t0 = time.perf_counter()
    uq = SpanUQ.load(args.probe)
    dev = templated_rows(args.dev)
    res = uq.score_many([{"prompt": r["prompt"], "response": r["response"]} for r in dev], progress=False)
    wrong = np.array([r["metadata"]["variant"] == "other reference" for r in dev])
    scores = [candidates(r) for r in res]
    print(f"dev-like: {len(dev)} templated answers to bundled prompts ({wrong.sum()} wrong), AUROC wrong vs right")
    for name in scores[0]:
        x = np.array([s[name] for s in scores])
        print(f"  {name:9s} AUROC {rank_auroc(wrong, x):.3f}   range {x.min():.3f}-{x.max():.3f}, sd {x.std():.3f}")

    pairs = pasted_pairs()[: args.pasted]
    texts = {p.correct.text: p.prompt for p in pairs} | {p.planted.text: p.prompt for p in pairs}
    order = list(texts)
    out = uq.score_many([{"prompt": texts[t], "response": t} for t in order], progress=False)
    by_text = {t: candidates(r) for t, r in zip(order, out)}
    print(f"pasted: {len(pairs)} pairs ({len({p.correct.text for p in pairs})} answers), planted vs correct twin")
    for name in by_text[order[0]]:
        c = np.array([by_text[p.correct.text][name] for p in pairs])
        w = np.array([by_text[p.planted.text][name] for p in pairs])
        acc = float(np.mean((w > c) + 0.5 * (w == c)))
        x = np.concatenate([c, w])
        y = np.concatenate([np.zeros(len(c), bool), np.ones(len(w), bool)])
        print(f"  {name:9s} pair accuracy {acc:.3f} (n = {len(pairs)} pairs)   AUROC {rank_auroc(y, x):.3f}   "
              f"range {x.min():.3f}-{x.max():.3f}, sd {x.std():.3f}")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
