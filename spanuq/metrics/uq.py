"""Span- and sequence-level metrics (paper §4.2, App. "Sequence-Level Evaluation"); detection
metrics are in ``detection.py``, the every-labelled-span scoreboard in ``scoring.py``.

Span level (over paired soft labels ``u* ∈ [0, 1]`` and scores ``û``)
    AUROC     binary hallucination detection, positives ``u* ≥ 0.5``; a tie at the threshold is
              positive (`is_positive`).  Computed as the Mann–Whitney statistic over mid-ranks,
              ``(Σ rank(û₊) − n₊(n₊+1)/2) / (n₊ n₋)``: equal to sklearn's ``roc_auc_score``
              (tests/test_metrics.py checks it) and ~20x faster, which the bootstrap's
              thousands of resamples per row feel
    MAE       ``mean |û − u*|`` (needs ``û ∈ [0, 1]``)
    ρ_s       Spearman rank correlation; Pearson ``r`` alongside
    ECE       soft-label expected calibration error (``ece.py``); ``ECE_cal`` after a
              temperature ``T`` fitted on dev (``fit_temperature``)
Sequence level
    ``u*_seq`` = mean span ``u*`` of a response; Spearman, Pearson, ``AUROC@0.3``
    (positives ``u*_seq ≥ 0.3``) and MAE of ``û_seq``.

JSON convention
---------------
Every value ends up in a JSON metrics file (DVC), so no NaN or inf is ever
emitted.  Each metric is a dict:

* defined:   ``{"value": float, "ci": [lo, hi] | None}`` (+ ``"n_boot": k`` when a
  bootstrap ran: the number of resamples in which the metric was defined and
  that the 95% percentile interval was computed from);
* undefined: ``{"value": None, "ci": None, "undefined": "<reason>"}``, e.g.
  ``"one class only: all 12 spans have u* < 0.5"``, ``"constant predictions"``,
  ``"fewer than 2 items"``, ``"scores outside [0, 1] ..."``.

Counts (``n``, ``n_pos``, ...) and the temperature are plain numbers.

Confidence intervals come from a cluster bootstrap over responses: spans of one
response are correlated, so whole responses (``groups``) are resampled with
replacement, and every metric is recomputed on the same resamples.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from scipy.stats import pearsonr, rankdata, spearmanr

from ..model.calibration import apply_temperature
from .ece import expected_calibration_error

CI_LEVEL = 0.95
_RANGE_TOL = 1e-6  # float round-off tolerated (and clipped) on [0, 1] scores; anything beyond is "outside"


# ---------------------------------------------------------------- the binary label

def is_positive(u, threshold: float = 0.5) -> np.ndarray:
    """Which soft labels count as *wrong* (the positive class of every AUROC): ``u* ≥ threshold``.

    The tie is positive, by decision (the paper's ``u ≥ 0.5``): a claim that at most half
    of the voting samples back is not one the model would reliably say again.  The
    offline teacher's default support rule gives whole votes (0 or 1) and an odd S, so
    u* = 0.5 arises only when abstentions leave an even number of voters split evenly.
    """
    return np.asarray(u, dtype=float) >= threshold


# ---------------------------------------------------------------- what a number can show

WIDE_CI = 0.1  # every table flags a 95% interval wider than ±WIDE_CI


def wide_interval(m, half_width: float = WIDE_CI) -> bool:
    """Is the metric's 95% interval wider than ±half_width (too wide to rank methods that close)?"""
    ci = m.get("ci") if isinstance(m, dict) else None
    return bool(ci) and (ci[1] - ci[0]) / 2 > half_width


def negatives(block) -> str:
    """``"negatives / items"`` of a metrics block (``n``, ``n_pos``): what its AUROC rests on; ``–`` if absent."""
    if not isinstance(block, dict) or block.get("n") is None or block.get("n_pos") is None:
        return "–"
    return f"{int(block['n']) - int(block['n_pos'])}/{int(block['n'])}"


# ---------------------------------------------------------------- JSON-safe values

class Undefined(Exception):
    """Raised by a metric function when the metric is undefined; the message is the reason."""


def defined(value: float, ci: Sequence[float] | None = None, n_boot: int | None = None) -> dict:
    """A defined metric; a non-finite value becomes undefined instead of NaN in JSON."""
    value = float(value)
    if not math.isfinite(value):
        return undefined("non-finite result")
    out: dict = {"value": value, "ci": [float(ci[0]), float(ci[1])] if ci is not None else None}
    if n_boot is not None:
        out["n_boot"] = int(n_boot)
    return out


def undefined(reason: str) -> dict:
    return {"value": None, "ci": None, "undefined": reason}


def metric_at(tree, *path: str):
    """``tree[path[0]][path[1]]…``, None where a step is missing (``metric_at(metrics, "span", "auroc")``)."""
    for key in path:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def metric_value(m, *path: str) -> float | None:
    """The point value of a metric: of ``m`` itself, or of `metric_at` ``(m, *path)``.  A metric
    dict gives its ``value``, a plain number itself; a missing or non-finite metric gives None."""
    m = metric_at(m, *path)
    v = m.get("value") if isinstance(m, dict) else m
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


# ---------------------------------------------------------------- input checks

def to_numpy(x, dtype=np.float64) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _paired(u_true, u_pred) -> tuple[np.ndarray, np.ndarray]:
    y, s = to_numpy(u_true).ravel(), to_numpy(u_pred).ravel()
    if y.shape != s.shape:
        raise ValueError(f"u_true has {y.size} items but u_pred has {s.size}")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(s))):
        raise ValueError("labels and scores must be finite")
    if y.size and (y.min() < 0 or y.max() > 1):
        raise ValueError(f"soft labels u* must lie in [0, 1] (min {y.min():.4g}, max {y.max():.4g})")
    return y, s


def _unit_scores(s: np.ndarray) -> tuple[np.ndarray | None, str | None]:
    """Scores usable as probabilities (round-off clipped), or None and the reason they are not."""
    if s.size and (s.min() < -_RANGE_TOL or s.max() > 1 + _RANGE_TOL):
        return None, (f"scores outside [0, 1] (min {s.min():.4g}, max {s.max():.4g}); "
                      "MAE/ECE need scores on the u* scale")
    return np.clip(s, 0.0, 1.0), None


def _need(n: int, k: int) -> None:
    if n == 0:
        raise Undefined("no items")
    if n < k:
        raise Undefined(f"fewer than {k} items")


def _need_variation(y: np.ndarray, s: np.ndarray) -> None:
    if np.ptp(s) == 0:
        raise Undefined("constant predictions")
    if np.ptp(y) == 0:
        raise Undefined("constant labels")


# ---------------------------------------------------------------- metric functions
# Each takes (u_true, scores) and returns a float or raises Undefined(reason).

def _auroc_fn(threshold: float, item: str = "spans") -> Callable[..., float]:
    """AUROC of scores for the binary label ``u* ≥ threshold``."""
    def auroc(y: np.ndarray, s: np.ndarray, g=None) -> float:
        _need(len(y), 1)
        pos = is_positive(y, threshold)
        if pos.all() or not pos.any():
            side = f"u* >= {threshold:g}" if pos.all() else f"u* < {threshold:g}"
            raise Undefined(f"one class only: all {len(y)} {item} have {side}")
        return rank_auroc(pos, s)
    return auroc


def rank_auroc(pos: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve of scores ``s`` for boolean labels ``pos`` (both classes present):
    the probability that a random positive outscores a random negative, ties counted half."""
    pos = np.asarray(pos, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    ranks = rankdata(np.asarray(s, dtype=np.float64))  # mid-ranks: a tie counts half
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _mae(y: np.ndarray, s: np.ndarray, g=None) -> float:
    _need(len(y), 1)
    return float(np.mean(np.abs(np.asarray(y, dtype=np.float64) - np.asarray(s, dtype=np.float64))))


def _spearman(y: np.ndarray, s: np.ndarray, g=None) -> float:
    _need(len(y), 2)
    _need_variation(y, s)
    rho, _ = spearmanr(y, s)
    return float(rho)


def _pearson(y: np.ndarray, s: np.ndarray, g=None) -> float:
    _need(len(y), 2)
    _need_variation(y, s)
    r, _ = pearsonr(y, s)
    return float(r)


def _ece_fn(n_bins: int) -> Callable[..., float]:
    def ece(y: np.ndarray, s: np.ndarray, g=None) -> float:
        _need(len(y), 1)
        return expected_calibration_error(y, s, n_bins)
    return ece


def _pair_accuracy_fn(min_gap: float) -> Callable[..., float]:
    """Within-answer pairwise ranking accuracy.

    Over every pair (i, j) of spans of the same response whose labels differ by at
    least ``min_gap`` (|u*_i − u*_j| ≥ 0.3 by default), the share that the scores
    order the same way; a tie in the scores counts 1/2.  A method that gives every
    span of an answer one score (a broadcast sequence score) gets exactly 0.5: this
    is what "which part of the answer is wrong" asks, and AUROC over all spans of a
    split does not (it also rewards telling answers apart).
    """
    def pair_accuracy(y: np.ndarray, s: np.ndarray, g=None) -> float:
        if g is None:
            raise Undefined("needs the response of each span")
        ok, n = _pair_counts(y, s, np.asarray(g), min_gap)
        if n == 0:
            raise Undefined(f"no within-answer pair with |Δu*| >= {min_gap:g}")
        return ok / n
    return pair_accuracy


def _pair_counts(y: np.ndarray, s: np.ndarray, g: np.ndarray, min_gap: float) -> tuple[float, int]:
    """(concordant pairs + ties/2, pairs) over within-group pairs with |Δu*| ≥ min_gap."""
    _, inverse = np.unique(g.astype(str), return_inverse=True)
    ok, n = 0.0, 0
    for k in range(inverse.max() + 1 if len(inverse) else 0):
        idx = np.flatnonzero(inverse == k)
        if len(idx) < 2:
            continue
        dy = y[idx][:, None] - y[idx][None, :]
        ds = s[idx][:, None] - s[idx][None, :]
        sel = np.triu(np.abs(dy) >= min_gap, 1)
        n += int(sel.sum())
        ok += float((np.sign(dy[sel]) == np.sign(ds[sel])).sum() + 0.5 * (ds[sel] == 0).sum())
    return ok, n


def _always_undefined(reason: str) -> Callable[..., float]:
    def fn(y: np.ndarray, s: np.ndarray, g=None) -> float:
        raise Undefined(reason)
    return fn


# ---------------------------------------------------------------- cluster bootstrap

def resample_indices(groups: np.ndarray | None, n: int, n_resamples: int, seed: int
                      ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """``(item indices, draw ids)`` of ``n_resamples`` cluster-bootstrap resamples.

    Groups are drawn with replacement; ``draw ids`` number the draws, so a response
    drawn twice is two clusters (within-response pairs never cross copies).
    ``groups=None`` treats every item as its own cluster (the plain bootstrap; draw ids None).
    """
    rng = np.random.default_rng(seed)
    if groups is None:
        for _ in range(n_resamples):
            yield rng.integers(0, n, size=n), None
        return
    _, inverse = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
    for _ in range(n_resamples):
        picks = rng.integers(0, len(members), size=len(members))
        idx = np.concatenate([members[g] for g in picks])
        draws = np.repeat(np.arange(len(picks)), [len(members[g]) for g in picks])
        yield idx, draws


def percentile_ci(values: list[float]) -> list[float] | None:
    if len(values) < 2:
        return None
    a = (1 - CI_LEVEL) / 2 * 100
    lo, hi = np.percentile(np.asarray(values), [a, 100 - a])
    return [float(lo), float(hi)]


def _evaluate(fns: dict[str, Callable], y: np.ndarray, s: np.ndarray, bootstrap: int,
              groups: np.ndarray | None, seed: int) -> dict[str, dict]:
    """Point estimate of every metric, plus percentile CIs over shared (paired) resamples."""
    out: dict[str, dict] = {}
    for name, fn in fns.items():
        try:
            out[name] = defined(fn(y, s, groups))
        except Undefined as e:
            out[name] = undefined(str(e))
    if bootstrap <= 0:
        return out
    live = [k for k in fns if out[k]["value"] is not None]
    samples: dict[str, list[float]] = {k: [] for k in live}
    for idx, draws in resample_indices(groups, len(y), bootstrap, seed):
        for k in live:
            try:
                v = fns[k](y[idx], s[idx], draws)
            except Undefined:
                continue
            if math.isfinite(v):
                samples[k].append(v)
    for k in live:
        out[k] = defined(out[k]["value"], percentile_ci(samples[k]), n_boot=len(samples[k]))
    return out


def _check_groups(groups, n: int) -> np.ndarray | None:
    if groups is None:
        return None
    g = np.asarray(list(groups), dtype=object)
    if len(g) != n:
        raise ValueError(f"groups has {len(g)} entries for {n} items")
    return g


def bootstrap_info(bootstrap: int, seed: int, unit: str) -> dict:
    return {"resamples": int(bootstrap), "seed": int(seed), "unit": unit, "level": CI_LEVEL}


def paired_difference(u_true, a, b, groups, bootstrap: int, positive_threshold: float = 0.5,
                      pair_gap: float = 0.3, seed: int = 0) -> dict[str, tuple[float, list[float] | None]]:
    """AUROC(a) − AUROC(b) and pair accuracy(a) − pair accuracy(b) of two methods' scores of the same
    spans, each with a cluster-bootstrap interval over answers (the same resamples for both methods)."""
    y, a, b = to_numpy(u_true), to_numpy(a), to_numpy(b)
    g = _check_groups(groups, len(y))
    fns = {"auroc": _auroc_fn(positive_threshold), "pair_accuracy": _pair_accuracy_fn(pair_gap)}
    out = {}
    for name, fn in fns.items():
        boots = []
        for idx, draws in resample_indices(g, len(y), bootstrap, seed):
            try:
                boots.append(fn(y[idx], a[idx], draws) - fn(y[idx], b[idx], draws))
            except Undefined:
                continue
        out[name] = (fn(y, a, g) - fn(y, b, g), percentile_ci(boots))
    return out


# ---------------------------------------------------------------- span level

def span_metrics(u_true, u_pred, positive_threshold: float = 0.5, ece_bins: int = 10,
                 temperature: float | None = None, bootstrap: int = 0, groups=None, seed: int = 0,
                 pair_gap: float = 0.3, u_raw=None) -> dict:
    """AUROC, MAE, Spearman ρ_s, Pearson r, ECE and within-answer pair accuracy of
    scores ``û`` against soft labels ``u*``.

    AUROC and the correlations accept any real scores (e.g. entropies); MAE and ECE
    need ``û ∈ [0, 1]`` and are reported undefined otherwise (never clipped).
    ``groups`` (the response id of each span) adds ``pair_accuracy`` over pairs of
    one response with |Δu*| ≥ ``pair_gap`` and makes the bootstrap a cluster
    bootstrap over responses.  ``temperature``: a T fitted on dev; adds ``ece_cal``
    (ECE of σ(logit(û)/T)) and ``temperature``.  ``u_raw``: the uncalibrated scores
    of a method whose ``û`` is already calibrated; adds ``ece_raw``.  ``bootstrap``
    > 0 adds 95% percentile CIs.

    Returns ``{"n", "n_pos", ["n_groups", "n_pairs"], "auroc", "mae", "spearman",
    "pearson", "ece", ["ece_raw"], ["ece_cal", "temperature"], ["pair_accuracy"],
    ["bootstrap"]}``, metrics as in the module docstring.
    """
    y, s = _paired(u_true, u_pred)
    g = _check_groups(groups, len(y))
    unit_s, why = _unit_scores(s)
    fns: dict[str, Callable] = {
        "auroc": _auroc_fn(positive_threshold, "spans"),
        "mae": _mae if why is None else _always_undefined(why),
        "spearman": _spearman,
        "pearson": _pearson,
        "ece": _ece_fn(ece_bins) if why is None else _always_undefined(why),
    }
    scores = unit_s if why is None else s
    out: dict = {"n": int(len(y)), "n_pos": int(is_positive(y, positive_threshold).sum())}
    if g is not None:
        out["n_groups"] = int(len(set(map(str, g))))
        out["n_pairs"] = _pair_counts(y, s, g, pair_gap)[1]
        fns["pair_accuracy"] = _pair_accuracy_fn(pair_gap)
    if temperature is not None:
        out["temperature"] = float(temperature)
        out.update(_evaluate({"ece_cal": _ece_fn(ece_bins) if why is None else _always_undefined(why)},
                             y, apply_temperature(scores, temperature) if why is None else s,
                             bootstrap, g, seed))
    if u_raw is not None:
        _, raw = _paired(u_true, u_raw)
        raw_unit, why_raw = _unit_scores(raw)
        out.update(_evaluate({"ece_raw": _ece_fn(ece_bins) if why_raw is None else _always_undefined(why_raw)},
                             y, raw_unit if why_raw is None else raw, bootstrap, g, seed))
    out.update(_evaluate(fns, y, scores, bootstrap, g, seed))
    if bootstrap > 0:
        out["bootstrap"] = bootstrap_info(bootstrap, seed, "response" if g is not None else "span")
    return _order(out, ["n", "n_pos", "n_groups", "n_pairs", "auroc", "mae", "spearman", "pearson", "ece",
                        "ece_raw", "ece_cal", "temperature", "pair_accuracy", "bootstrap"])


def _order(d: dict, keys: list[str]) -> dict:
    return {k: d[k] for k in keys if k in d}


# ---------------------------------------------------------------- sequence level

def sequence_metrics(u_seq_true, u_seq_pred, positive_threshold: float = 0.3, bootstrap: int = 0,
                     seed: int = 0) -> dict:
    """Spearman, Pearson, ``auroc@<thr>`` (positives ``u*_seq ≥ thr``) and MAE over responses.

    Returns ``{"n", "n_pos", "spearman", "pearson", "auroc@0.3", "mae", ["bootstrap"]}``;
    the bootstrap resamples sequences.
    """
    y, s = _paired(u_seq_true, u_seq_pred)
    unit_s, why = _unit_scores(s)
    auroc_key = f"auroc@{positive_threshold:g}"
    fns = {"spearman": _spearman, "pearson": _pearson,
           auroc_key: _auroc_fn(positive_threshold, "sequences"),
           "mae": _mae if why is None else _always_undefined(why)}
    out: dict = {"n": int(len(y)), "n_pos": int(is_positive(y, positive_threshold).sum())}
    out.update(_evaluate(fns, y, unit_s if why is None else s, bootstrap, None, seed))
    if bootstrap > 0:
        out["bootstrap"] = bootstrap_info(bootstrap, seed, "sequence")
    return out
