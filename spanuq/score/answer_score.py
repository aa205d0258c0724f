"""û_seq of a given answer: the answer's score from its shown spans' calibrated û.

The probe's own answer-level output û_seq was trained on the backbone's own answers ("would it say
this again"); read teacher-forced on an answer someone else wrote it barely moves (0.248–0.294 over
528 pasted answers, sd 0.009), so it says nothing about whether that answer holds a wrong fact.  The
given-answer calibration maps each *span*'s û to the chance that fact is wrong, so the answer's score
is built from them:

    û_seq(given) = max_k û_k          (the most doubtful shown fact; 0 when no span is shown)

the chance the answer's most doubtful fact is wrong — a lower bound of the chance that any is.
Noisy-or, 1 − Π_k (1 − û_k), reads the spans as independent and saturates on a long answer (a
dozen facts at û 0.2 give 0.93 whatever they say); ``scripts/given_answer_score.py`` measured the
candidates on templated answers to the training prompts and chose this one (docs/score.md has the
figures).  The probe's own û_seq stays in ``u_seq_raw`` for what was fitted on it (the conformal
threshold).  The backbone's own answers keep the probe's û_seq.
"""
from __future__ import annotations

from dataclasses import replace

from ..model.postprocess import Prediction


def given_u_seq(us) -> float:
    """The answer's score from its shown spans' calibrated û (module docstring)."""
    return float(max(us, default=0.0))


def with_given_u_seq(pred: Prediction | None) -> Prediction | None:
    """``pred`` with û_seq from its shown spans (`given_u_seq`), the probe's own kept as ``u_seq_raw``."""
    if pred is None:
        return None
    return replace(pred, u_seq=given_u_seq([s.u for s in pred.shown()]))
