"""Span-, detection- and sequence-level metrics (paper §4.2, App. "Sequence-Level Evaluation").

Span level (over paired soft labels ``u* ∈ [0, 1]`` and scores ``û``)
    AUROC     binary hallucination detection, positives ``u* ≥ 0.5`` (sklearn ``roc_auc_score``)
    MAE       ``mean |û − u*|`` (needs ``û ∈ [0, 1]``)
    ρ_s       Spearman rank correlation; Pearson ``r`` alongside
    ECE       soft-label expected calibration error (``ece.py``); ``ECE_cal`` after a
              temperature ``T`` fitted on dev (``fit_temperature``)
Detection
    predicted spans (validity ≥ threshold) are matched one-to-one to ground-truth
    spans by maximum total token IoU (Hungarian, ``linear_sum_assignment``) among
    pairs with IoU ≥ 0.3; precision = matched / predicted, recall = matched / GT,
    F1 = harmonic mean, all micro-averaged (counts summed over responses).
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
from scipy.optimize import linear_sum_assignment
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import mean_absolute_error, roc_auc_score

from ..model.span_ops import pairwise_span_iou
from .ece import apply_temperature, expected_calibration_error, fit_temperature

__all__ = [
    "span_metrics", "detection_metrics", "sequence_metrics", "evaluate_predictions",
    "oracle_span_metrics", "matched_pairs", "match_spans", "token_iou_matrix",
    "expected_calibration_error", "fit_temperature", "apply_temperature",
    "format_table", "metric_value", "defined", "undefined",
]

CI_LEVEL = 0.95
_RANGE_TOL = 1e-6  # float round-off tolerated (and clipped) on [0, 1] scores; anything beyond is "outside"


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


def metric_value(m) -> float | None:
    """The point value of a metric dict (or a plain number, or None)."""
    return m.get("value") if isinstance(m, dict) else m


# ---------------------------------------------------------------- input checks

def _to_numpy(x, dtype=np.float64) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _paired(u_true, u_pred) -> tuple[np.ndarray, np.ndarray]:
    y, s = _to_numpy(u_true).ravel(), _to_numpy(u_pred).ravel()
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

def _auroc_fn(threshold: float, item: str = "spans") -> Callable[[np.ndarray, np.ndarray], float]:
    """AUROC of scores for the binary label ``u* ≥ threshold``."""
    def auroc(y: np.ndarray, s: np.ndarray) -> float:
        _need(len(y), 1)
        pos = y >= threshold
        if pos.all() or not pos.any():
            side = f"u* >= {threshold:g}" if pos.all() else f"u* < {threshold:g}"
            raise Undefined(f"one class only: all {len(y)} {item} have {side}")
        return float(roc_auc_score(pos, s))
    return auroc


def _mae(y: np.ndarray, s: np.ndarray) -> float:
    _need(len(y), 1)
    return float(mean_absolute_error(y, s))


def _spearman(y: np.ndarray, s: np.ndarray) -> float:
    _need(len(y), 2)
    _need_variation(y, s)
    rho, _ = spearmanr(y, s)
    return float(rho)


def _pearson(y: np.ndarray, s: np.ndarray) -> float:
    _need(len(y), 2)
    _need_variation(y, s)
    r, _ = pearsonr(y, s)
    return float(r)


def _ece_fn(n_bins: int) -> Callable[[np.ndarray, np.ndarray], float]:
    def ece(y: np.ndarray, s: np.ndarray) -> float:
        _need(len(y), 1)
        return expected_calibration_error(y, s, n_bins)
    return ece


def _always_undefined(reason: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def fn(y: np.ndarray, s: np.ndarray) -> float:
        raise Undefined(reason)
    return fn


# ---------------------------------------------------------------- cluster bootstrap

def _resample_indices(groups: np.ndarray | None, n: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Item indices of ``n_resamples`` cluster-bootstrap resamples (groups drawn with replacement).

    ``groups=None`` treats every item as its own cluster (the plain bootstrap).
    """
    rng = np.random.default_rng(seed)
    if groups is None:
        for _ in range(n_resamples):
            yield rng.integers(0, n, size=n)
        return
    _, inverse = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
    for _ in range(n_resamples):
        picks = rng.integers(0, len(members), size=len(members))
        yield np.concatenate([members[g] for g in picks])


def _percentile_ci(values: list[float]) -> list[float] | None:
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
            out[name] = defined(fn(y, s))
        except Undefined as e:
            out[name] = undefined(str(e))
    if bootstrap <= 0:
        return out
    live = [k for k in fns if out[k]["value"] is not None]
    samples: dict[str, list[float]] = {k: [] for k in live}
    for idx in _resample_indices(groups, len(y), bootstrap, seed):
        for k in live:
            try:
                v = fns[k](y[idx], s[idx])
            except Undefined:
                continue
            if math.isfinite(v):
                samples[k].append(v)
    for k in live:
        out[k] = defined(out[k]["value"], _percentile_ci(samples[k]), n_boot=len(samples[k]))
    return out


def _check_groups(groups, n: int) -> np.ndarray | None:
    if groups is None:
        return None
    g = np.asarray(list(groups), dtype=object)
    if len(g) != n:
        raise ValueError(f"groups has {len(g)} entries for {n} items")
    return g


def _bootstrap_info(bootstrap: int, seed: int, unit: str) -> dict:
    return {"resamples": int(bootstrap), "seed": int(seed), "unit": unit, "level": CI_LEVEL}


# ---------------------------------------------------------------- span level

def span_metrics(u_true, u_pred, positive_threshold: float = 0.5, ece_bins: int = 10,
                 temperature: float | None = None, bootstrap: int = 0, groups=None, seed: int = 0) -> dict:
    """AUROC, MAE, Spearman ρ_s, Pearson r and ECE of scores ``û`` against soft labels ``u*``.

    AUROC and the correlations accept any real scores (e.g. entropies); MAE and ECE
    need ``û ∈ [0, 1]`` and are reported undefined otherwise (never clipped).
    ``temperature``: a T fitted on dev; adds ``ece_cal`` (ECE of σ(logit(û)/T)) and
    ``temperature``.  ``bootstrap`` > 0 adds 95% percentile CIs from a cluster
    bootstrap over ``groups`` (the response id of each span; None → per span).

    Returns ``{"n", "n_pos", ["n_groups"], "auroc", "mae", "spearman", "pearson",
    "ece", ["ece_cal", "temperature"], ["bootstrap"]}``, metrics as in the module docstring.
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
    out: dict = {"n": int(len(y)), "n_pos": int((y >= positive_threshold).sum())}
    if g is not None:
        out["n_groups"] = int(len(set(map(str, g))))
    if temperature is not None:
        out["temperature"] = float(temperature)
        out.update(_evaluate({"ece_cal": _ece_fn(ece_bins) if why is None else _always_undefined(why)},
                             y, apply_temperature(scores, temperature) if why is None else s,
                             bootstrap, g, seed))
    out.update(_evaluate(fns, y, scores, bootstrap, g, seed))
    if bootstrap > 0:
        out["bootstrap"] = _bootstrap_info(bootstrap, seed, "response" if g is not None else "span")
    return _order(out, ["n", "n_pos", "n_groups", "auroc", "mae", "spearman", "pearson", "ece", "ece_cal",
                        "temperature", "bootstrap"])


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
    out: dict = {"n": int(len(y)), "n_pos": int((y >= positive_threshold).sum())}
    out.update(_evaluate(fns, y, unit_s if why is None else s, bootstrap, None, seed))
    if bootstrap > 0:
        out["bootstrap"] = _bootstrap_info(bootstrap, seed, "sequence")
    return out


# ---------------------------------------------------------------- detection

def _token_intervals(spans) -> torch.Tensor:
    """Inclusive token spans (b, e) → half-open float intervals [b, e + 1)."""
    a = torch.as_tensor(_to_numpy(spans, np.float64)).reshape(-1, 2).clone()
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


def _counts_detection(matched: np.ndarray, n_pred: np.ndarray, n_gt: np.ndarray, ious: list[float],
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
        for idx in _resample_indices(None, len(matched), bootstrap, seed):
            for k in live:
                try:
                    samples[k].append(fns[k](matched[idx], n_pred[idx], n_gt[idx]))
                except Undefined:
                    pass
        for k in live:
            out[k] = defined(out[k]["value"], _percentile_ci(samples[k]), n_boot=len(samples[k]))
        out["bootstrap"] = _bootstrap_info(bootstrap, seed, "response")
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
    return _counts_detection(np.array(m), np.array(p), np.array(g), ious, bootstrap, seed)


# ---------------------------------------------------------------- probe predictions

def _example_u_seq(example) -> float | None:
    """Ground-truth sequence uncertainty: ``example.u_seq``, else the mean span u*, else None."""
    if example.u_seq is not None:
        return float(example.u_seq)
    u = _to_numpy(example.u).ravel()
    return float(u.mean()) if u.size else None


def _kept(pred: dict, validity_threshold: float) -> tuple[np.ndarray, np.ndarray]:
    spans = _to_numpy(pred["spans"], np.int64).reshape(-1, 2)
    u = _to_numpy(pred["u"]).ravel()
    keep = _to_numpy(pred["validity"]).ravel() >= validity_threshold
    return spans[keep], u[keep]


def _check_aligned(preds: list[dict], examples: list) -> None:
    if len(preds) != len(examples):
        raise ValueError(f"{len(preds)} predictions for {len(examples)} examples")
    for p, e in zip(preds, examples):
        if "prompt_id" in p and p["prompt_id"] != e.prompt_id:
            raise ValueError(f"prediction for {p['prompt_id']!r} is aligned with example {e.prompt_id!r}")


def matched_pairs(preds: list[dict], examples: list, cfg) -> dict:
    """Match each response's kept predictions (validity ≥ cfg.validity_threshold) to its GT spans.

    Returns ``{"u_true", "u_pred", "groups"}`` over matched pairs (u* of the GT span,
    û of its prediction, prompt id) and per-response ``matched``, ``n_pred``,
    ``n_gt`` counts and the matched ``ious``.  ``fit_temperature(r["u_true"],
    r["u_pred"])`` on dev gives the temperature for test.
    """
    _check_aligned(preds, examples)
    ut, up, grp, ious, m, p, g = [], [], [], [], [], [], []
    for pred, ex in zip(preds, examples):
        spans, u = _kept(pred, cfg.validity_threshold)
        gt, u_star = _to_numpy(ex.spans, np.int64).reshape(-1, 2), _to_numpy(ex.u).ravel()
        pairs = match_spans(spans, gt, cfg.iou_threshold)
        for pi, gi, iou in pairs:
            ut.append(u_star[gi])
            up.append(u[pi])
            grp.append(ex.prompt_id)
            ious.append(iou)
        m.append(len(pairs))
        p.append(len(spans))
        g.append(len(gt))
    return {"u_true": np.array(ut, dtype=np.float64), "u_pred": np.array(up, dtype=np.float64),
            "groups": grp, "ious": ious, "matched": np.array(m, dtype=np.int64),
            "n_pred": np.array(p, dtype=np.int64), "n_gt": np.array(g, dtype=np.int64)}


def _sequence_from(examples: list, seq_preds: list[float | None], cfg, bootstrap: int) -> dict:
    yt, yp = [], []
    for ex, s in zip(examples, seq_preds):
        t = _example_u_seq(ex)
        if t is None or s is None:
            continue
        yt.append(t)
        yp.append(float(s))
    return sequence_metrics(yt, yp, cfg.seq_positive_threshold, bootstrap, cfg.seed)


def evaluate_predictions(preds: list[dict], examples: list, cfg, bootstrap: int = 0,
                         temperature: float | None = None) -> dict:
    """All metrics of probe predictions (``predict_examples`` output, aligned with ``examples``).

    Span metrics over matched (GT, prediction) pairs, clustered by prompt id;
    detection over kept predictions (responses with no GT count their predictions
    as false positives); sequence metrics over responses with a defined ``u*_seq``.
    ``cfg`` is an ``EvaluateConfig``.  Returns
    ``{"n_responses", "span": span_metrics(...), "detection": detection counts/P/R/F1,
    "sequence": sequence_metrics(...), "coverage": matched GT / all GT (a metric dict)}``.
    """
    r = matched_pairs(preds, examples, cfg)
    span = span_metrics(r["u_true"], r["u_pred"], cfg.positive_threshold, cfg.ece_bins, temperature,
                        bootstrap, r["groups"], cfg.seed)
    detection = _counts_detection(r["matched"], r["n_pred"], r["n_gt"], r["ious"], bootstrap, cfg.seed)
    detection["iou_threshold"] = float(cfg.iou_threshold)
    detection["validity_threshold"] = float(cfg.validity_threshold)
    sequence = _sequence_from(examples, [p.get("u_seq") for p in preds], cfg, bootstrap)
    n_gt = int(r["n_gt"].sum())
    coverage = defined(r["matched"].sum() / n_gt) if n_gt else undefined("no ground-truth spans")
    return {"n_responses": len(examples), "span": span, "detection": detection, "sequence": sequence,
            "coverage": coverage}


def oracle_span_metrics(scores_per_example: list, examples: list, cfg, bootstrap: int = 0,
                        temperature: float | None = None) -> dict:
    """Metrics of a baseline that scores the ground-truth spans directly (oracle boundaries).

    ``scores_per_example[i]`` holds one score per GT span of ``examples[i]``.  Span
    metrics over all GT spans (clustered by prompt id); sequence metrics with
    ``û_seq`` = mean of the response's span scores (responses without spans are
    skipped).  Returns ``{"n_responses", "span", "sequence"}``.
    """
    if len(scores_per_example) != len(examples):
        raise ValueError(f"{len(scores_per_example)} score arrays for {len(examples)} examples")
    ut, up, grp, seq_pred = [], [], [], []
    for sc, ex in zip(scores_per_example, examples):
        sc, u_star = _to_numpy(sc).ravel(), _to_numpy(ex.u).ravel()
        if sc.shape != u_star.shape:
            raise ValueError(f"{ex.prompt_id}: {sc.size} scores for {u_star.size} ground-truth spans")
        ut.append(u_star)
        up.append(sc)
        grp += [ex.prompt_id] * len(sc)
        seq_pred.append(float(sc.mean()) if sc.size else None)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    span = span_metrics(cat(ut), cat(up), cfg.positive_threshold, cfg.ece_bins, temperature,
                        bootstrap, grp, cfg.seed)
    sequence = _sequence_from(examples, seq_pred, cfg, bootstrap)
    return {"n_responses": len(examples), "span": span, "sequence": sequence}


# ---------------------------------------------------------------- table

_COLUMNS = [("AUROC", "span", "auroc"), ("MAE", "span", "mae"), ("ρ_s", "span", "spearman"),
            ("Pearson", "span", "pearson"), ("ECE", "span", "ece"), ("F1", "detection", "f1"),
            ("seq ρ", "sequence", "spearman"), ("seq AUROC@0.3", "sequence", "auroc@")]


def _cell(m) -> str:
    """``0.812 [0.77, 0.85]``, ``0.812`` without a CI, ``n/a`` when undefined or missing."""
    v = metric_value(m)
    if v is None:
        return "n/a"
    ci = m.get("ci") if isinstance(m, dict) else None
    return f"{v:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{v:.3f}"


def _lookup(row: dict, section: str, key: str):
    if "span" not in row and section == "span":
        row = {"span": row}  # a bare span_metrics dict
    sec = row.get(section) or {}
    if key.endswith("@"):
        key = next((k for k in sec if k.startswith(key)), key)
    return sec.get(key)


def format_table(rows: dict[str, dict]) -> str:
    """Plain-text table: one row per method (an ``evaluate_predictions``-shaped dict, or a
    bare ``span_metrics`` dict), columns AUROC, MAE, ρ_s, Pearson, ECE, F1, seq ρ, seq AUROC@0.3."""
    header = ["method"] + [_seq_auroc_header(rows) if key == "auroc@" else name for name, _, key in _COLUMNS]
    body = [[str(method)] + [_cell(_lookup(row, sec, key)) for _, sec, key in _COLUMNS]
            for method, row in rows.items()]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in body])


def _seq_auroc_header(rows: dict[str, dict]) -> str:
    for row in rows.values():
        for k in (row.get("sequence") or {}):
            if k.startswith("auroc@"):
                return "seq AUROC" + k[len("auroc"):]
    return "seq AUROC@0.3"
