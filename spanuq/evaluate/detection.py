"""Span detection metrics (paper §4.2).

Predicted spans (validity ≥ threshold) are matched one-to-one to ground-truth spans by
maximum total token IoU (Hungarian, ``linear_sum_assignment``) among pairs with
IoU ≥ 0.3; precision = matched / predicted, recall = matched / GT, F1 = harmonic mean,
all micro-averaged (counts summed over responses); mean IoU over the matched pairs.
Values follow ``metrics.py``'s JSON convention (defined / undefined, bootstrap CIs over
responses).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from ..model.span_ops import pairwise_span_iou
from ..metrics.uq import Undefined, bootstrap_info, defined, percentile_ci, resample_indices, to_numpy, undefined

__all__ = ["detection_metrics", "match_spans", "token_iou_matrix"]

def _token_intervals(spans) -> torch.Tensor:
    """Inclusive token spans (b, e) → half-open float intervals [b, e + 1)."""
    a = torch.as_tensor(to_numpy(spans, np.float64)).reshape(-1, 2).clone()
    if (a[:, 1] < a[:, 0]).any():
        raise ValueError("spans must have end >= start (inclusive token indices)")
    a[:, 1] += 1
    return a


def token_iou_matrix(pred_spans, gt_spans) -> np.ndarray:
    """(P, 2) × (G, 2) inclusive token spans → (P, G) IoU of the token sets."""
    return pairwise_span_iou(_token_intervals(pred_spans), _token_intervals(gt_spans)).numpy()


def match_spans(pred_spans, gt_spans, iou_threshold: float = 0.3) -> list[tuple[int, int, float]]:
    """One-to-one matching of predicted to ground-truth spans, maximising total IoU.

    Pairs below ``iou_threshold`` (or with no overlap) cannot match: their IoU is
    zeroed before the Hungarian assignment, so the result maximises the summed IoU
    of the kept pairs.  Returns ``[(pred_idx, gt_idx, iou)]`` sorted by ``gt_idx``.
    """
    iou = token_iou_matrix(pred_spans, gt_spans)
    if iou.size == 0:
        return []
    ok = (iou >= iou_threshold) & (iou > 0)
    gain = np.where(ok, iou, 0.0)
    rows, cols = linear_sum_assignment(gain, maximize=True)
    pairs = [(int(p), int(g), float(iou[p, g])) for p, g in zip(rows, cols) if ok[p, g]]
    return sorted(pairs, key=lambda t: t[1])


def counts_detection(matched: np.ndarray, n_pred: np.ndarray, n_gt: np.ndarray, ious: list[float],
                      bootstrap: int, seed: int) -> dict:
    """Micro P/R/F1 from per-response counts, with a bootstrap over responses."""
    fns = {
        "precision": lambda m, p, g: _ratio(m.sum(), p.sum(), "no predicted spans"),
        "recall": lambda m, p, g: _ratio(m.sum(), g.sum(), "no ground-truth spans"),
        "f1": lambda m, p, g: _f1(m.sum(), p.sum(), g.sum()),
    }
    out: dict = {"n_pred": int(n_pred.sum()), "n_gt": int(n_gt.sum()), "n_matched": int(matched.sum())}
    for k, fn in fns.items():
        try:
            out[k] = defined(fn(matched, n_pred, n_gt))
        except Undefined as e:
            out[k] = undefined(str(e))
    out["mean_iou"] = defined(float(np.mean(ious))) if ious else undefined("no matched spans")
    if bootstrap > 0:
        live = [k for k in fns if out[k]["value"] is not None]
        samples: dict[str, list[float]] = {k: [] for k in live}
        for idx, _ in resample_indices(None, len(matched), bootstrap, seed):
            for k in live:
                try:
                    samples[k].append(fns[k](matched[idx], n_pred[idx], n_gt[idx]))
                except Undefined:
                    pass
        for k in live:
            out[k] = defined(out[k]["value"], percentile_ci(samples[k]), n_boot=len(samples[k]))
        out["bootstrap"] = bootstrap_info(bootstrap, seed, "response")
    return out


def _ratio(num: float, den: float, reason: str) -> float:
    if den == 0:
        raise Undefined(reason)
    return float(num / den)


def _f1(m: float, p: float, g: float) -> float:
    """F1 = 2PR / (P + R) = 2m / (p + g); 0 when nothing matched."""
    if p == 0:
        raise Undefined("no predicted spans")
    if g == 0:
        raise Undefined("no ground-truth spans")
    return float(2 * m / (p + g))


def detection_metrics(pred_spans: Sequence, gt_spans: Sequence, iou_threshold: float = 0.3,
                      bootstrap: int = 0, seed: int = 0) -> dict:
    """Micro precision / recall / F1 of span detection over responses.

    ``pred_spans[i]`` (P_i, 2) and ``gt_spans[i]`` (G_i, 2): inclusive token spans of
    response i (predictions already filtered by validity).  Returns
    ``{"n_pred", "n_gt", "n_matched", "precision", "recall", "f1", "mean_iou", ["bootstrap"]}``.
    """
    if len(pred_spans) != len(gt_spans):
        raise ValueError(f"{len(pred_spans)} prediction lists for {len(gt_spans)} responses")
    m, p, g, ious = [], [], [], []
    for ps, gs in zip(pred_spans, gt_spans):
        pairs = match_spans(ps, gs, iou_threshold)
        m.append(len(pairs))
        p.append(len(_token_intervals(ps)))
        g.append(len(_token_intervals(gs)))
        ious += [iou for *_, iou in pairs]
    return counts_detection(np.array(m), np.array(p), np.array(g), ious, bootstrap, seed)
