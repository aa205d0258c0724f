"""û_seq of a given answer: the answer's score from its shown spans' calibrated û.

The probe's own answer-level output û_seq was trained on the backbone's own answers ("would it say
this again"); read teacher-forced on an answer someone else wrote it barely moves (0.249–0.291 over
120 templated answers, sd 0.009; 0.267–0.289 over the planted bench's 160 pasted twins), so its value
cannot be read.  The given-answer calibration maps each *span*'s û to the chance that fact is wrong,
so the answer's score is built from them:

    û_seq(given) = mean_k û_k          (the average chance a shown fact is wrong; 0 when none is shown)

Chosen among the span rules (max, noisy-or 1 − Π(1 − û_k), mean) on dev-like answers — templated
answers to the bundled *training* prompts, right or naming another prompt's reference
(``scripts/given_answer_score.py``, 120 answers): AUROC mean 0.721, max 0.708, noisy-or 0.699 (close:
within the noise of 120 answers); the probe's own û_seq ranks them at 0.770 but its values span
0.249–0.291.  Noisy-or also saturates on a long answer (a dozen facts at û 0.2 give 0.93).  The
probe's own û_seq stays in ``u_seq_raw`` for what was fitted on it (the conformal threshold), and the
backbone's own answers keep it.
"""
from __future__ import annotations

from dataclasses import replace

from ..model.postprocess import Prediction


def given_u_seq(us) -> float:
    """The answer's score from its shown spans' calibrated û (module docstring)."""
    us = list(us)
    return float(sum(us) / len(us)) if us else 0.0


def with_given_u_seq(pred: Prediction | None) -> Prediction | None:
    """``pred`` with û_seq from its shown spans (`given_u_seq`), the probe's own kept as ``u_seq_raw``."""
    if pred is None:
        return None
    return replace(pred, u_seq=given_u_seq([s.u for s in pred.shown()]))
