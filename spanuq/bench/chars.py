"""Per-character scores ↔ the task's labels.

Every method of the benchmark (the probe and each control) yields one score per character
of the answer, in [0, 1].  Its soft labels are that vector written as runs of equal value
(characters at 0 are left out: the task reads a missing character as 0); its hard labels are
the runs of characters whose score is above a threshold chosen on the validation split.
"""
from __future__ import annotations

import numpy as np


def runs(mask_or_values: np.ndarray) -> list[tuple[int, int, float]]:
    """Maximal runs ``(start, end, value)`` of equal consecutive values."""
    v = np.asarray(mask_or_values, dtype=np.float64)
    if len(v) == 0:
        return []
    cuts = np.flatnonzero(np.diff(v) != 0) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(v)]])
    return [(int(s), int(e), float(v[s])) for s, e in zip(starts, ends)]


def soft_labels(scores: np.ndarray, digits: int = 6) -> list[dict]:
    """``[{"start", "end", "prob"}]`` for the runs of non-zero (rounded) scores."""
    v = np.round(np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0), digits)
    return [{"start": s, "end": e, "prob": p} for s, e, p in runs(v) if p > 0]


def hard_labels(scores: np.ndarray, threshold: float) -> list[list[int]]:
    """``[[start, end]]`` runs of characters with score > threshold."""
    mask = np.asarray(scores, dtype=np.float64) > threshold
    return [[s, e] for s, e, on in runs(mask) if on]


def token_values_to_chars(offsets: list[tuple[int, int]], values, text_len: int) -> np.ndarray:
    """Each character gets the value of the token whose offsets cover it (0 where none does)."""
    out = np.zeros(text_len, dtype=np.float64)
    for (s, e), v in zip(offsets, values):
        out[s:e] = float(v)
    return out


def spans_to_chars(spans: list[tuple[int, int]], text_len: int, value: float = 1.0) -> np.ndarray:
    out = np.zeros(text_len, dtype=np.float64)
    for s, e in spans:
        out[s:e] = value
    return out
