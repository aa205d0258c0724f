"""Calibration of soft span uncertainty: ECE and temperature scaling (paper §4.2, App. MoB analysis).

Soft-label ECE
--------------
A span's label ``u* ∈ [0, 1]`` is itself an empirical error rate (the fraction of
``S`` sampled answers that do not support it), so the observed error rate of a
bin is simply the mean ``u*`` of its spans.  With ``B`` equal-width bins on the
prediction ``û`` (bin ``k`` = ``[k/B, (k+1)/B)``, the last one closed)::

    ECE = Σ_b (n_b / n) · | mean(û)_b − mean(u*)_b |
        = (1/n) · Σ_b | Σ_{i∈b} û_i − Σ_{i∈b} u*_i |

Temperature scaling
-------------------
``û_T = σ(logit(û) / T)`` (`spanuq.model.calibration.apply_temperature`); ``T`` is fitted on dev by minimising the soft-label
binary cross-entropy ``−mean[u* log û_T + (1 − u*) log(1 − û_T)]`` (the paper's
"ECE_cal" is the ECE of ``û_T`` on test).  ``T > 1`` softens over-confident
predictions towards 0.5, ``T < 1`` sharpens them; ``T = 1`` is the identity.
The loss is convex in ``1/T``, so it is unimodal in ``log T`` and a bounded
scalar search over ``log T`` finds the optimum.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_expit

from ..model.calibration import clipped_logit, unit_interval

T_BOUNDS = (0.05, 20.0)


def expected_calibration_error(u_true, u_pred, n_bins: int = 10) -> float:
    """Soft-label ECE with ``n_bins`` equal-width bins on ``û`` (see the module docstring).

    Both arrays must lie in [0, 1] and be non-empty.
    """
    y = unit_interval(u_true, "u_true")
    p = unit_interval(u_pred, "u_pred")
    if y.shape != p.shape:
        raise ValueError(f"u_true {y.shape} and u_pred {p.shape} differ in length")
    if y.size == 0:
        raise ValueError("ECE of zero items")
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    bins = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    gap = np.bincount(bins, weights=p - y, minlength=n_bins)  # Σ_{i∈b} (û_i − u*_i)
    return float(np.abs(gap).sum() / y.size)


def soft_bce(u_true, u_pred_logits) -> float:
    """Mean soft-label BCE ``−[u* log σ(z) + (1 − u*) log σ(−z)]`` from logits ``z`` (stable)."""
    y = np.asarray(u_true, dtype=np.float64)
    z = np.asarray(u_pred_logits, dtype=np.float64)
    return float(-np.mean(y * log_expit(z) + (1.0 - y) * log_expit(-z)))


def fit_temperature(u_true, u_pred, bounds: tuple[float, float] = T_BOUNDS) -> float:
    """Temperature ``T`` minimising ``soft_bce(u*, logit(û) / T)`` over ``T ∈ bounds``.

    Fit this on dev and pass it to ``span_metrics(..., temperature=T)`` on test.
    """
    y = unit_interval(u_true, "u_true")
    z = clipped_logit(unit_interval(u_pred))
    if y.shape != z.shape:
        raise ValueError(f"u_true {y.shape} and u_pred {z.shape} differ in length")
    if y.size == 0:
        raise ValueError("cannot fit a temperature on zero items")
    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    res = minimize_scalar(lambda log_t: soft_bce(y, z / np.exp(log_t)), bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-6})
    return float(np.exp(res.x))


def fit_platt(u_true, u_pred, bounds: tuple[float, float] = T_BOUNDS) -> tuple[float, float]:
    """``(T, b)`` minimising ``soft_bce(u*, logit(û) / T + b)``: temperature scaling with a bias
    (Platt scaling on the logit), for scores whose level is off as well as their spread — û of
    answers the backbone did not write. `fit_platt_surprisal` without the span term."""
    t, b, _, _ = fit_platt_surprisal(u_true, u_pred, np.zeros((np.size(u_pred), 2)), bounds)
    return t, b


def fit_platt_surprisal(u_true, u_pred, span, bounds: tuple[float, float] = T_BOUNDS
                        ) -> tuple[float, float, float, float]:
    """``(T, b, w, v)`` minimising ``soft_bce(u*, logit(û) / T + b + w · S − v · H₀)``: `fit_platt`
    with each span's surprisal S and the entropy H₀ where it begins (``span``: (n, 2), from
    `spanuq.model.calibration.span_surprisal`). w, v ≥ 0: a span that surprised the backbone more
    is never read as more likely right, nor one where it expected more. Convex in (1/T, b, w, v)."""
    from scipy.optimize import minimize

    y = unit_interval(u_true, "u_true")
    z = clipped_logit(unit_interval(u_pred))
    x = np.asarray(span, dtype=np.float64).reshape(-1, 2)
    if not (y.shape == z.shape and len(x) == len(y)):
        raise ValueError(f"u_true {y.shape}, u_pred {z.shape} and span surprisal {x.shape} differ in length")
    if y.size == 0:
        raise ValueError("cannot fit a calibration on zero items")
    res = minimize(lambda w: soft_bce(y, z * w[0] + w[1] + x[:, 0] * w[2] - x[:, 1] * w[3]),
                   x0=np.array([1.0, 0.0, 0.0, 0.0]), method="L-BFGS-B",
                   bounds=[(1.0 / bounds[1], 1.0 / bounds[0]), (-20.0, 20.0), (0.0, 5.0), (0.0, 5.0)])
    return float(1.0 / res.x[0]), float(res.x[1]), float(res.x[2]), float(res.x[3])


def fit_logistic(u_true, x, l2: float = 1e-3) -> tuple[np.ndarray, float]:
    """``(w, b)`` minimising ``soft_bce(u*, x @ w + b) + l2 · |w|²``: a logistic regression on a few columns ``x``
    (n, k) — the score of an answer from several readings of it (`spanuq.train.reader`).  Convex."""
    from scipy.optimize import minimize

    y = unit_interval(u_true, "u_true")
    x = np.asarray(x, dtype=np.float64).reshape(len(y), -1)
    if y.size == 0:
        raise ValueError("cannot fit a calibration on zero items")
    k = x.shape[1]
    res = minimize(lambda w: soft_bce(y, x @ w[:k] + w[k]) + l2 * float(w[:k] @ w[:k]), x0=np.zeros(k + 1),
                   method="L-BFGS-B")
    return res.x[:k].copy(), float(res.x[k])


def flag_threshold(u_true, u_cal, precision: float, positive: float = 0.5, min_flagged: int = 10,
                   grid: np.ndarray | None = None) -> tuple[float, dict]:
    """The lowest threshold t on calibrated û at which the spans flagged (û ≥ t) are wrong
    (u* ≥ ``positive``) at least ``precision`` of the time, over at least ``min_flagged`` spans:
    the most a reader is told "likely wrong" while that stays mostly true. Where no t reaches the
    precision, the t of the highest precision (ties: the lower t). Returns t and what it achieves."""
    y = unit_interval(u_true, "u_true") >= positive
    p = unit_interval(u_cal)
    grid = np.round(np.arange(0.05, 0.951, 0.01), 2) if grid is None else np.asarray(grid)
    rows = []
    for t in grid:
        flagged = p >= t
        n = int(flagged.sum())
        if n >= min_flagged:
            rows.append((float(t), float(y[flagged].mean()), n, float((flagged & y).sum() / max(1, y.sum()))))
    if not rows:
        return 0.5, {"precision": None, "flagged": 0, "recall": None, "reached": False}
    ok = [r for r in rows if r[1] >= precision]
    t, prec, n, rec = ok[0] if ok else max(rows, key=lambda r: (r[1], -r[0]))
    return t, {"precision": prec, "flagged": n, "recall": rec, "reached": bool(ok), "target": precision}


def pair_margin(u_right, u_wrong, confidence: float = 0.9, min_pairs: int = 10,
                grid: np.ndarray | None = None) -> tuple[float, dict]:
    """The smallest margin m such that, over pairs of answers that differ in one fact (the right
    value, a wrong one) whose scores differ by at least m, the lower score is the right answer's
    at least ``confidence`` of the time: how much more certain a replacement must be before it is
    trusted (`spanuq.score.refine`). Where no m reaches it, the m of the highest share (ties: the
    lower m)."""
    r, w = np.asarray(u_right, dtype=np.float64), np.asarray(u_wrong, dtype=np.float64)
    gap = np.abs(w - r)
    grid = np.round(np.arange(0.0, 0.51, 0.02), 2) if grid is None else np.asarray(grid)
    rows = []
    for m in grid:
        sel = gap >= max(m, 1e-9)
        if sel.sum() >= min_pairs:
            rows.append((float(m), float((w[sel] > r[sel]).mean()), int(sel.sum())))
    if not rows:
        return float(grid[-1]), {"share": None, "pairs": 0, "reached": False}
    ok = [x for x in rows if x[1] >= confidence]
    m, share, n = ok[0] if ok else max(rows, key=lambda x: (x[1], -x[0]))
    return m, {"share": share, "pairs": n, "reached": bool(ok), "target": confidence}
