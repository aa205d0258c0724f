"""Free settings of each method, chosen on the validation split, and its predictions.

A `Method` holds, per variant (e.g. the probe's ``"u*p v>=0.3"``), one per-character score
vector per answer.  On validation:

* the **soft** labels' variant is the one with the highest mean Cor;
* the **hard** labels' variant and threshold (characters with score > t are marked) are
  the pair with the highest mean IoU.

Ties go to the first variant, then the lowest threshold.  The choice is written to the
settings file that the test run reads (`ledger.py`); the test split never chooses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .chars import hard_labels, soft_labels
from .metrics import cor

THRESHOLDS = tuple(round(0.05 * k, 2) for k in range(20))  # 0.0 … 0.95


@dataclass
class Method:
    key: str
    name: str
    what: str  # one line: what the method reads
    variants: dict[str, list[np.ndarray]]
    thresholds: tuple[float, ...] = THRESHOLDS
    kind: str = "control"  # probe | ablation (the probe with a part removed) | control
    notes: list[str] = field(default_factory=list)


def _ref_mask(ref: dict) -> np.ndarray:
    m = np.zeros(ref["text_len"], dtype=bool)
    for s, e in ref["hard_labels"]:
        m[s:e] = True
    return m


def _mean_iou(masks: list[np.ndarray], scores: list[np.ndarray], t: float) -> float:
    """Mean IoU of ``score > t`` against the reference masks (same as `metrics.iou` on runs)."""
    total = 0.0
    for m, s in zip(masks, scores):
        p = s > t
        union = np.count_nonzero(m | p)
        total += 1.0 if union == 0 else np.count_nonzero(m & p) / union
    return total / len(masks)


def _mean_cor(refs: list[dict], scores: list[np.ndarray]) -> float:
    return float(np.mean([cor(r["soft_labels"], soft_labels(s), r["text_len"]) for r, s in zip(refs, scores)]))


def choose(method: Method, refs: list[dict]) -> dict:
    """The settings of ``method`` that score best on ``refs`` (the validation split)."""
    masks = [_ref_mask(r) for r in refs]
    cors = {v: _mean_cor(refs, s) for v, s in method.variants.items()}
    soft = max(cors, key=lambda v: (cors[v], -list(cors).index(v)))
    best = None
    for v, s in method.variants.items():
        for t in method.thresholds:
            val = _mean_iou(masks, s, t)
            if best is None or val > best[0] + 1e-12:
                best = (val, v, t)
    return {"soft": soft, "hard": {"variant": best[1], "threshold": best[2]},
            "val": {"cor": cors[soft], "iou": best[0]}, "n_candidates": {"soft": len(cors),
                                                                         "hard": len(cors) * len(method.thresholds)}}


def predictions(method: Method, settings: dict) -> list[dict]:
    """Per answer ``{"soft_labels", "hard_labels"}`` under the chosen settings."""
    for v in (settings["soft"], settings["hard"]["variant"]):
        if v not in method.variants:
            raise ValueError(f"{method.key}: the settings name variant {v!r}, which this run does not have "
                             f"({sorted(method.variants)}); choose settings again on the validation split")
    soft = method.variants[settings["soft"]]
    hard = method.variants[settings["hard"]["variant"]]
    t = float(settings["hard"]["threshold"])
    return [{"soft_labels": soft_labels(s), "hard_labels": hard_labels(h, t)} for s, h in zip(soft, hard)]
