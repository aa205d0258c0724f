"""With sources, a person named in full is also read by the surname alone.

Sources often name a person by the surname ("credited to the chemist Cavendish") where an answer
gives the full name ("Henry Cavendish").  The given-answer mapping reads S = Σ s_t over a span's
tokens (`spanuq.model.calibration`), and a given name the sources never state is surprising to the
backbone whoever the person is: the right person, named in full, then costs about as much as a
wrong one.  So each person an answer read with sources names in two words or more is read a second
time, in a copy of the answer where every such name is cut to its last word, after the same
sources, and the name's surprisal is the lower of the two readings:

    S(name) = min( Σ_{t ∈ name} s_t ,  Σ_{t ∈ surname, in the copy} s'_t )

A name is backed when either form of it is: the any-reading rule the windows of long sources use
(`spanuq.score.grounded`).  The lower reading is written into the answer's token surprisal (its
name's tokens 0, its last token the sum), so every span over the whole name reads it; the entropy
where the name begins, H₀, is the same in both readings (they share everything before it).

What it cannot see: a wrong given name with the right surname reads as the surname does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Name = tuple[int, int, int]  # characters: where the name starts, where its last word starts, where it ends


def full_names(nlp, text: str) -> list[Name]:
    """The people spaCy's pipeline ``nlp`` finds in ``text`` named in two words or more ("Sir William
    Ramsey", "Henry Cavendish"), in reading order."""
    out = []
    for ent in nlp(text).ents:
        if ent.label_ != "PERSON":
            continue
        words = [t for t in ent if t.is_alpha]
        if len(words) >= 2:
            last = words[-1]
            out.append((ent.start_char, last.idx, last.idx + len(last.text)))
    return out


def by_surname(text: str, names: Sequence[Name]) -> tuple[str, list[int]]:
    """``text`` with each name cut to its last word, and where each last word starts in it."""
    parts, starts, pos, n = [], [], 0, 0
    for a, s, e in names:
        parts.append(text[pos:a])
        n += a - pos
        starts.append(n)
        parts.append(text[s:e])
        n += e - s
        pos = e
    parts.append(text[pos:])
    return "".join(parts), starts


def tokens_over(offsets: Sequence[tuple[int, int]], a: int, e: int) -> list[int]:
    """The tokens whose characters overlap [a, e)."""
    return [t for t, (x, y) in enumerate(offsets) if x < e and y > a]


def surname_reading(surprisal: np.ndarray, offsets: Sequence[tuple[int, int]], names: Sequence[Name],
                    short: np.ndarray, short_offsets: Sequence[tuple[int, int]], starts: Sequence[int]) -> np.ndarray:
    """``surprisal`` (T,) of the answer with each name's tokens read the lower way (module docstring);
    ``short``, ``short_offsets``: the copy's token surprisal and offsets; ``starts``: `by_surname`'s."""
    out = np.array(surprisal, dtype=np.float64, copy=True)
    for (a, s, e), b in zip(names, starts):
        full, last = tokens_over(offsets, a, e), tokens_over(short_offsets, b, b + e - s)
        if full and last:
            s_short = float(np.sum(short[last]))
            if s_short < out[full].sum():
                out[full] = 0.0
                out[full[-1]] = s_short
    return out


def read_names(nlp, text: str, offsets: Sequence[tuple[int, int]], surprisal: np.ndarray,
               read: Callable[[str], tuple[np.ndarray, list[tuple[int, int]]]]) -> np.ndarray:
    """The answer's token ``surprisal`` with its full names read by the surname too (module docstring);
    ``read(copy)`` reads the copy after the same input and returns its (token surprisal, offsets).
    ``surprisal`` itself when the answer names nobody in full (nothing is read)."""
    names = full_names(nlp, text)
    if not names:
        return np.asarray(surprisal, dtype=np.float64)
    copy, starts = by_surname(text, names)
    short, short_offsets = read(copy)
    return surname_reading(surprisal, offsets, names, np.asarray(short, dtype=np.float64), short_offsets, starts)
