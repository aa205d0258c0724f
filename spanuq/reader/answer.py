"""The score of a whole answer the backbone wrote after its sources: is it the answer the sources give?

An answer of the backbone's own can be wrong with every word backed — it copied the wrong part of the paragraph
— so its score reads, besides how much of it the sources do not back, how it stands to the question
(`ANSWER_COLUMNS`, from the reader's reading of it):

* the logit of its least-backed span's raw û, and of their mean;
* of its new content words (content words the question does not hold: what it answers with), the largest
  share of the question's words near one of them in a source sentence (``question_near``), and the smallest
  gap between the question's best source sentence and the best one holding it (``question_gap``).

    s = σ(w · (c − μ)/σ + b)          (c: the columns; μ, σ, w, b fitted by `spanuq.train.reader.own_calibration`)
"""
from __future__ import annotations

import numpy as np

from ..model.calibration import clipped_logit
from .features import FEATURES
from .spans import kind

ANSWER_COLUMNS = ("logit_max_u", "logit_mean_u", "question_near", "question_gap")


def answer_columns(answer: str, words: list[tuple[int, int]], x: np.ndarray, u_raw: np.ndarray) -> np.ndarray:
    """`ANSWER_COLUMNS` of one answer: its words, their feature rows ``x`` and its spans' raw û."""
    if not len(words):
        return np.array([clipped_logit(np.array([1e-6]))[0]] * 2 + [0.0, 1.0])
    u = np.asarray(u_raw, dtype=np.float64) if len(u_raw) else np.array([1e-6])
    asked = x[:, FEATURES.index("in_question")]
    new = [i for i, (s, e) in enumerate(words) if kind(answer[s:e]) == "content" and asked[i] == 0] or list(range(len(words)))
    return np.array([*clipped_logit(np.array([u.max(), u.mean()])), float(x[new, FEATURES.index("question_near")].max()),
                     float(x[new, FEATURES.index("question_gap")].min())])


def answer_score(columns: np.ndarray, fitted: dict) -> float:
    """s of the module docstring, with the mapping ``fitted`` (``seq_mean``, ``seq_scale``, ``seq_weights``,
    ``seq_offset``)."""
    z = (np.asarray(columns) - np.asarray(fitted["seq_mean"])) / np.asarray(fitted["seq_scale"])
    return float(1.0 / (1.0 + np.exp(-(z @ np.asarray(fitted["seq_weights"]) + fitted["seq_offset"]))))
