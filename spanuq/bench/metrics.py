"""The Mu-SHROOM metrics (SemEval-2025 Task 3), as the task's ``participant_kit/scorer.py`` defines them.

Both are computed per answer over its characters, then averaged over answers:

IoU (hard labels)
    ``|R ∩ P| / |R ∪ P|`` for the sets of character indices inside the reference and
    predicted hard spans ``[start, end)``; 1.0 when both sets are empty.
Cor (soft labels)
    Spearman's ρ between the reference and predicted per-character probabilities (a
    character outside every soft span has probability 0; a later span overwrites an earlier
    one where they overlap).  When either vector is constant ρ is undefined and the task
    scores 1.0 if both are constant, else 0.0 (uniqueness is counted on values rounded
    to 8 decimals).

Predictions without hard labels get them from the soft labels (characters with prob > 0.5,
touching spans merged); without soft labels, each hard span gets prob 1.0.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from ..metrics.uq import percentile_ci, resample_indices, defined, undefined

Span = tuple[int, int]


def hard_from_soft(soft: list[dict]) -> list[list[int]]:
    """Hard spans: the soft spans with prob > 0.5, consecutive ones (end == next start) merged."""
    out: list[list[int]] = []
    prev_end = -1
    for s in sorted(soft, key=lambda d: (d["start"], d["end"])):
        if s["prob"] <= 0.5:
            continue
        if s["start"] == prev_end:
            out[-1][1] = s["end"]
        else:
            out.append([s["start"], s["end"]])
        prev_end = s["end"]
    return out


def soft_from_hard(hard: list[list[int]]) -> list[dict]:
    return [{"start": int(s), "end": int(e), "prob": 1.0} for s, e in hard]


def char_vector(soft: list[dict], text_len: int) -> np.ndarray:
    """Per-character probabilities of soft spans (later spans overwrite earlier ones)."""
    v = np.zeros(text_len, dtype=np.float64)
    for s in soft:
        v[s["start"]: s["end"]] = s["prob"]
    return v


def iou(ref_hard: list[list[int]], pred_hard: list[list[int]]) -> float:
    """Character IoU of two sets of hard spans; 1.0 when neither marks anything."""
    ref = {i for s, e in ref_hard for i in range(s, e)}
    pred = {i for s, e in pred_hard for i in range(s, e)}
    if not ref and not pred:
        return 1.0
    return len(ref & pred) / len(ref | pred)


def cor(ref_soft: list[dict], pred_soft: list[dict], text_len: int) -> float:
    """Spearman ρ of per-character probabilities; the task's rule for constant vectors."""
    r, p = char_vector(ref_soft, text_len), char_vector(pred_soft, text_len)
    nr, npred = len({round(x, 8) for x in r.tolist()}), len({round(x, 8) for x in p.tolist()})
    if nr == 1 or npred == 1:
        return float(nr == npred)
    return float(spearmanr(r, p).correlation)


def item_scores(refs: list[dict], preds: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per-answer (IoU, Cor) of predictions ``{"hard_labels"?, "soft_labels"?}`` against
    references ``{"hard_labels", "soft_labels", "text_len"}``, in the same order."""
    if len(refs) != len(preds):
        raise ValueError(f"{len(refs)} references but {len(preds)} predictions")
    ious, cors = [], []
    for r, p in zip(refs, preds):
        soft = p.get("soft_labels")
        hard = p.get("hard_labels")
        if soft is None and hard is None:
            raise ValueError("a prediction has neither hard_labels nor soft_labels")
        if hard is None:
            hard = hard_from_soft(soft)
        if soft is None:
            soft = soft_from_hard(hard)
        ious.append(iou(r["hard_labels"], hard))
        cors.append(cor(r["soft_labels"], soft, r["text_len"]))
    return np.asarray(ious), np.asarray(cors)


def mean_ci(values: np.ndarray, bootstrap: int = 1000, seed: int = 0, groups=None) -> dict:
    """Mean over items with a 95% percentile bootstrap interval (items resampled; with ``groups``,
    whole groups of items — e.g. the pairs of one question — are resampled together)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return undefined("no items")
    if bootstrap <= 0 or len(values) < 2:
        return defined(float(values.mean()))
    means = [float(values[idx].mean()) for idx, _ in resample_indices(groups, len(values), bootstrap, seed)]
    return defined(float(values.mean()), percentile_ci(means), n_boot=len(means))
