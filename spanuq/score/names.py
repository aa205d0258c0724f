"""With sources, a person named in full is also read by the surname alone.

Sources often name a person by the surname ("credited to the chemist Cavendish") where an answer
gives the full name ("Henry Cavendish").  The given-answer mapping reads S = Σ s_t over a span's
tokens (`spanuq.model.calibration`), and a given name the sources never state is surprising to the
backbone whoever the person is: the right person, named in full, then costs about as much as a
wrong one.  So each person an answer read with sources names in two words or more, whose surname
(the name's last word) is a word of the sources, is read a second time by the surname alone — the
answer up to the name, then its last word, after the same sources — and the name's surprisal is the
lower of the two readings:

    S(name) = min( Σ_{t ∈ name} s_t ,  Σ_{t ∈ surname} s'_t ),   s'_t read after the answer up to the name

A name whose surname the sources never write keeps its one reading: no source backs it by the
surname.  A name is backed when either form of it is: the any-reading rule the windows of long
sources use (`spanuq.score.grounded`).  The lower reading is written into the answer's token surprisal (its
name's tokens 0, its last token the sum), so every span over the whole name reads it; the entropy
where the name begins, H₀, is the same in both readings (they share everything before it).  The names
are read from the last to the first, so a reader on the backbone's KV cache (`spanuq.llm.prefix`) keeps
the answer's tokens before each name and feeds only the surname's.

What it cannot see: a wrong given name with the right surname reads as the surname does.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from ..label.targets import char_span_to_tokens

Name = tuple[int, int, int]  # characters: where the name starts, where its last word starts, where it ends


def full_names(nlp, text: str) -> list[Name]:
    """The people spaCy's pipeline ``nlp`` finds in ``text`` named in two words or more ("William
    Ramsey", "Henry Cavendish"; a title such as "Sir" is not part of the name), in reading order."""
    from .facts import parsed

    out = []
    for ent in parsed(nlp, text).ents:
        if ent.label_ != "PERSON":
            continue
        words = [t for t in ent if t.is_alpha]
        if len(words) >= 2:
            last = words[-1]
            out.append((ent.start_char, last.idx, last.idx + len(last.text)))
    return out


def tokens_over(offsets: Sequence[tuple[int, int]], a: int, e: int) -> list[int]:
    """The tokens whose characters overlap [a, e) (`char_span_to_tokens`, as a list)."""
    span = char_span_to_tokens(list(offsets), a, e)
    return [] if span is None else list(range(span[0], span[1] + 1))


def keep_lower(surprisal: np.ndarray, name_tokens: list[int], s_surname: float) -> None:
    """Write the surname's reading ``s_surname`` over the name's tokens when it is the lower one (in place)."""
    if name_tokens and s_surname < surprisal[name_tokens].sum():
        surprisal[name_tokens] = 0.0
        surprisal[name_tokens[-1]] = s_surname


def named_in(sources: Sequence[str], word: str) -> bool:
    """Whether ``word`` is a word of one of the ``sources``."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    return any(pattern.search(s) for s in sources)


def read_names(nlp, text: str, offsets: Sequence[tuple[int, int]], surprisal: np.ndarray, sources: Sequence[str],
               read: Callable[[str], tuple[np.ndarray, list[tuple[int, int]]]]) -> np.ndarray:
    """The answer's token ``surprisal`` (T,) with its full names whose surname the ``sources`` (their texts)
    name read by the surname too (module docstring); ``read(piece)`` reads a piece of text (the answer up to a
    name, then its last word) after the same input as the answer and returns its (token surprisal, character
    offsets).  Nothing is read when no such name is in the answer."""
    out = np.array(surprisal, dtype=np.float64, copy=True)
    names = [n for n in full_names(nlp, text) if named_in(sources, text[n[1]:n[2]])]
    for a, s, e in reversed(names):
        short, short_offsets = read(text[:a] + text[s:e])
        surname = tokens_over(short_offsets, a, a + e - s)
        if surname:
            keep_lower(out, tokens_over(offsets, a, e), float(np.sum(np.asarray(short, dtype=np.float64)[surname])))
    return out
