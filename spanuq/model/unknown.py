"""Does the backbone know what an answer is about at all?

Before it reads a claim, the backbone predicts the claim's first token; where it knows the
subject that prediction is peaked (low entropy), where it has never heard of it the prediction
is flat. An answer whose claims all start where the backbone's prediction is flat cannot be
checked against what the backbone knows: its û says little, and the reader is told so
(``unverified: the backbone does not know this subject``) instead of seeing every span red.

    knowledge_entropy(entropy, spans) = mean over the answer's shown spans of the entropy (nats)
                                        of the distribution its first token was read from

`fit_unknown_threshold` chooses, on dev answers whose parent question the backbone did or did
not answer right itself (`spanuq.label.given`), the lowest τ above which the answers are
mostly (``precision``) about questions the backbone got wrong.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def knowledge_entropy(entropy, spans: Sequence[tuple[int, int]]) -> float | None:
    """Mean entropy at the first token of each span (inclusive token spans); None without spans."""
    e = np.asarray(entropy, dtype=np.float64).ravel()
    firsts = [e[b] for b, _ in spans if 0 <= b < len(e)]
    return float(np.mean(firsts)) if firsts else None


def fit_unknown_threshold(stats: Sequence[float], knew: Sequence[bool], precision: float = 0.8,
                          min_answers: int = 10) -> tuple[float | None, dict]:
    """The lowest τ such that, among answers with ``stats`` ≥ τ (at least ``min_answers``), the
    share whose subject the backbone did *not* know is at least ``precision``; None when no τ
    reaches it. Also returns the AUROC of the statistic for "did not know" and what τ achieves."""
    from scipy.stats import rankdata

    s = np.asarray(stats, dtype=np.float64)
    unknown = ~np.asarray(knew, dtype=bool)
    info: dict = {"answers": int(len(s)), "unknown": int(unknown.sum())}
    if len(s) < min_answers or unknown.all() or not unknown.any():
        return None, {**info, "reason": "too few answers of each kind"}
    r = rankdata(s)
    n1, n0 = unknown.sum(), (~unknown).sum()
    info["auroc"] = float((r[unknown].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
    for tau in np.unique(s):
        above = s >= tau
        if above.sum() < min_answers:
            break
        share = float(unknown[above].mean())
        if share >= precision:
            return float(tau), {**info, "precision": share, "flagged": int(above.sum()),
                                "recall": float((above & unknown).sum() / n1)}
    return None, {**info, "reason": f"no threshold reaches precision {precision}"}
