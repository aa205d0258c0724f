"""`spanuq bench real`'s items and scores: real passages with people's marks, through the product.

Three parts, each on items no reader or calibration was trained, chosen or fitted on (test splits, split by
article, `spanuq.data.real`):

* **marked** — WiCE test: Wikipedia claims read against the web article each cites, people's marks of the
  words the article does not back (or a user's own file of the same form, ``--data``).  Per word of the claim
  (`spanuq.reader.features.answer_words`; punctuation left out): the product's score is the û of the span
  holding it (the highest where spans overlap), 0 for a word in no span; **word AUROC** against the marks;
  per claim the task metrics of Mu-SHROOM (`spanuq.bench.metrics`): **IoU** of the characters the red line
  marks against the marked ones, **Cor** of the characters' û against them.
* **swaps** — same-passage swaps built from XQuAD's test articles (`spanuq.label.swaps`): the right answer and
  a twin naming another entity of the same kind from the paragraph, as "The answer is X." and as the
  paragraph's own sentence; **pair accuracy** of the slot's û (the span overlapping it most), and the share of
  right twins at or above the red line the product draws (``flag_threshold``).
* **passages** — a paragraph's own sentence read against every paragraph of its article: the share of its spans
  that name that paragraph (``passage``).
* **own** — the backbone answers XQuAD test questions with their paragraph (`SpanUQ.score(question,
  context=[paragraph])`), the answer is right when it names a gold answer (the teacher's rule); **AUROC** and
  **ECE** of û_seq against "wrong", and how many results are ``scored``.

Beside the product, on the same items (`CONTROLS`): the words absent from the sources, the backbone's surprisal
given the sources (read after every window of them, the lowest per token), an entity/number tagger, and the
whole answer marked.  Intervals: 95% bootstrap over articles.
"""
from __future__ import annotations

import numpy as np

from ..reader.features import answer_words, forms
from ..context.numbers import with_digits
from .metrics import cor, iou

CONTROLS = ("absent", "surprisal", "tagger", "whole")
NAMES = {"spanuq": "SpanUQ (the product)", "absent": "words absent from the sources",
         "surprisal": "surprisal given the sources", "tagger": "entity+number tagger", "whole": "whole answer"}


def scored_words(answer: str) -> list[tuple[int, int]]:
    """The words a marked part is scored on: every word of the answer but punctuation."""
    return [(s, e) for s, e in answer_words(answer) if forms(answer[s:e])]


def word_labels(words: list[tuple[int, int]], marks) -> np.ndarray:
    return np.array([float(any(s < b and e > a for a, b in marks or [])) for s, e in words])


def span_word_scores(words: list[tuple[int, int]], spans: list[tuple[int, int, float]]) -> np.ndarray:
    """Per word, the highest û of the spans ``(start, end, û)`` overlapping it (0 where none does)."""
    out = np.zeros(len(words))
    for k, (s, e) in enumerate(words):
        out[k] = max((u for a, b, u in spans if a < e and b > s), default=0.0)
    return out


def char_scores(n: int, spans: list[tuple[int, int, float]]) -> np.ndarray:
    """Per character, the highest score of the spans covering it."""
    v = np.zeros(n)
    for s, e, u in spans:
        v[s:e] = np.maximum(v[s:e], u)
    return v


def word_chars(n: int, words: list[tuple[int, int]], scores: np.ndarray) -> np.ndarray:
    """Per character, the score of the word holding it (0 between words)."""
    v = np.zeros(n)
    for (s, e), x in zip(words, scores):
        v[s:e] = x
    return v


def task_scores(answer: str, marks, soft: np.ndarray, hard: np.ndarray) -> tuple[float, float]:
    """(IoU, Cor) of one answer: ``hard`` the characters marked by the method (bool), ``soft`` its per-character
    scores, against people's ``marks`` (Mu-SHROOM's metrics)."""
    ref = [[s, e] for s, e in marks or []]
    ref_soft = [{"start": s, "end": e, "prob": 1.0} for s, e in ref]
    pred = [[int(s), int(e)] for s, e in _runs(hard)]
    pred_soft = [{"start": int(s), "end": int(e), "prob": float(soft[s])} for s, e in _runs(soft > 0, soft)]
    return iou(ref, pred), cor(ref_soft, pred_soft, len(answer))


def _runs(mask: np.ndarray, values: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Maximal runs of True (of equal value, with ``values``)."""
    out, start = [], None
    for i in range(len(mask) + 1):
        same = (i < len(mask) and mask[i] and start is not None
                and (values is None or values[i] == values[start]))
        if start is not None and not same:
            out.append((start, i))
            start = None
        if i < len(mask) and mask[i] and start is None:
            start = i
    return out


def absent_words(answer: str, passages: list[str], words: list[tuple[int, int]]) -> np.ndarray:
    """1 for a word whose form the sources (number words with their digits) do not hold, else 0."""
    pool = set(forms(" ".join(with_digits(p) for p in passages)))
    return np.array([float(not all(f in pool for f in forms(with_digits(answer[s:e])))) for s, e in words])


def pair_outcome(wrong: float, right: float) -> float:
    return 1.0 if wrong > right + 1e-12 else 0.5 if abs(wrong - right) <= 1e-12 else 0.0
