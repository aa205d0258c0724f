"""The probe's spans (`ScoreResult` of the public API) → one score per character.

`SpanUQ.score` returns word-aligned character spans, each with the calibrated û (the
probability that the span is wrong) and its validity p (the probability that the query
found a real span).  A character's score combines the spans that cover it and whose
validity is at least ``v_min``:

* ``u``        max û over the covering spans;
* ``u*p``      max p·û (an uncertain detection counts less);
* ``noisy-or`` 1 − Π (1 − p·û) (independent spans: the chance that any of them is wrong);
* ``u/max``    û / max û over the answer's kept spans: the answer's most doubtful span scores 1,
  the others by how close they come to it (a ranking inside the answer; the task's answers
  were picked to hold an error, so "which part" matters more than "how sure");
* ``const``    1 on every covered character: the probe's spans without û (an ablation row,
  not a setting of the probe's own row).

Characters covered by no such span score 0.  A span can first be trimmed of the function
words at its edges ("in Beijing" -> "Beijing", `trim_function_words`): people
mark the minimal wrong text, the probe's spans are word-aligned regressions that often take a
preposition or conjunction along.  The combination, ``v_min`` and the trimming are free
settings, chosen on the validation split (`select.py`).
"""
from __future__ import annotations

import re

import numpy as np

from ..data.aliases import stop_words
from ..label.spans import snap_to_words

MAPPINGS = ("u", "u*p", "noisy-or", "u/max")
V_MIN_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def trim_function_words(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) until it neither starts nor ends with a function word (a stop word
    that is not a number word: "in", "the", "and"; `aliases.stop_words`) or edge punctuation:
    "in Beijing," -> "Beijing".  A span of function words only is kept as it is."""
    stop = stop_words()
    words = [(start + m.start(), start + m.end()) for m in re.finditer(r"\S+", text[start:end])]

    def function_word(w: tuple[int, int]) -> bool:
        a, b = snap_to_words(text, *w)  # the word without its edge punctuation
        bare = text[a:b].lower()
        return not bare or bare in stop

    if not words or all(map(function_word, words)):
        return start, end
    while function_word(words[0]):
        words.pop(0)
    while function_word(words[-1]):
        words.pop()
    return snap_to_words(text, words[0][0], words[-1][1])


def probe_chars(result, text_len: int, mapping: str, v_min: float, trim_in: str | None = None) -> np.ndarray:
    """Per-character score of one `ScoreResult` (``None``: an answer that could not be scored → 0);
    with ``trim_in`` (the answer's text) each span is trimmed of edge function words first."""
    v = np.zeros(text_len, dtype=np.float64)
    if result is None:
        return v
    if mapping == "noisy-or":
        keep = np.ones(text_len, dtype=np.float64)
    kept = [s for s in result.spans if s.validity >= v_min]
    top = max((s.u for s in kept), default=0.0)
    for s in kept:
        a, b = (s.start, s.end) if trim_in is None else trim_function_words(trim_in, s.start, s.end)
        if mapping == "u":
            v[a:b] = np.maximum(v[a:b], s.u)
        elif mapping == "u*p":
            v[a:b] = np.maximum(v[a:b], s.u * s.validity)
        elif mapping == "noisy-or":
            keep[a:b] *= 1.0 - s.u * s.validity
        elif mapping == "u/max":
            v[a:b] = np.maximum(v[a:b], s.u / top if top > 0 else 0.0)
        elif mapping == "const":
            v[a:b] = 1.0
        else:
            raise ValueError(f"unknown mapping {mapping!r}; one of {MAPPINGS}")
    return 1.0 - keep if mapping == "noisy-or" else v


def probe_variants(results: list, texts: list[str], extra_v_min: float | None = None,
                   mappings: tuple[str, ...] = MAPPINGS) -> dict[str, list[np.ndarray]]:
    """Every (mapping, v_min, trimming) combination's per-character scores, keyed
    ``"<mapping> v>=<v_min>"`` (spans as returned) and ``"<mapping> v>=<v_min> trimmed"``."""
    grid = sorted(set(V_MIN_GRID) | ({round(float(extra_v_min), 4)} if extra_v_min is not None else set()))
    return {f"{m} v>={vm:g}{' trimmed' if trim else ''}":
            [probe_chars(r, len(t), m, vm, t if trim else None) for r, t in zip(results, texts)]
            for trim in (False, True) for m in mappings for vm in grid}


def variant_v_min(key: str) -> float:
    """The validity cut of a variant key: ``"u/max v>=0.1 trimmed"`` → 0.1."""
    return float(key.split(">=")[1].split()[0])


def u_seq_chars(results: list, text_lens: list[int]) -> list[np.ndarray]:
    """û_seq of the answer on every character (0 for an answer that could not be scored)."""
    return [np.full(n, 0.0 if r is None else float(r.u_seq)) for r, n in zip(results, text_lens)]
