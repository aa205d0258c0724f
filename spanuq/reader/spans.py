"""An answer's spans when it is read against sources: each name, number or content word with the function words
that lead into it.

Every word the reader scores (`spanuq.reader.features.answer_words`) but punctuation belongs to one span:

* each named entity or number spaCy finds (when spaCy is installed) is one span, whole ("Golden Gate Bridge",
  "July 11, 1909");
* every other content word is a span of its own;
* function words join the span that follows them in their clause ("in 1998", "by the club"); those at a clause's
  end, with nothing after them before punctuation, join the span before them ("died there"); a clause of
  function words alone is no span;
* forms of "be", "have", "do", the modals and the personal pronouns (`LINKING`) lead into nothing: they are in
  no span, and the function words just before them ("... and is") are in none either.

So no function word stands alone as a span, and no word is in two.  A span's raw û is the highest of its words'
chances of not being backed: people mark runs of words ("born in 1909"), and the reader scores a leading "in"
with the year it leads into.
"""
from __future__ import annotations

import numpy as np


from .features import FUNCTION_WORDS, forms

# forms of "be", "have", "do", the modals and the personal pronouns: they link a clause or stand for what it is
# about; they lead into nothing, so they are in no span
LINKING = frozenset("""is are was were be been being am has have had having do does did will would shall should
    can could may might must i you he she it we they me him her us them""".split())


def kind(text: str) -> str:
    """``punct`` (no letters or digits), ``linking`` (a form of be/have/do, a modal, a personal pronoun),
    ``function`` (function words only) or ``content``."""
    fs = forms(text)
    if not fs:
        return "punct"
    if all(f in LINKING for f in fs):
        return "linking"
    return "function" if all(f in FUNCTION_WORDS for f in fs) else "content"


def spans_of(answer: str, words: list[tuple[int, int]], entities=()) -> list[list[int]]:
    """Groups of word indices, one per span (module docstring), in reading order."""
    kinds = [kind(answer[s:e]) for s, e in words]
    entity_of = [-1] * len(words)
    for k, (a, b) in enumerate(entities):
        for i, (s, e) in enumerate(words):
            if s < b and e > a and entity_of[i] < 0 and kinds[i] != "punct":
                entity_of[i] = k
    groups: list[list[int]] = []
    pending: list[int] = []
    open_clause = False  # the last group is in the current clause (no punctuation since)
    i = 0
    while i < len(words):
        if entity_of[i] >= 0:
            j = i
            while j < len(words) and entity_of[j] == entity_of[i]:
                j += 1
            groups.append(pending + list(range(i, j)))
            pending, open_clause, i = [], True, j
            continue
        if kinds[i] in ("punct", "linking"):
            if pending and open_clause and kinds[i] == "punct":  # "... and died there."
                groups[-1] += pending
            pending, open_clause = [], False
            i += 1
            continue
        if kinds[i] == "function":
            pending.append(i)
        else:
            groups.append(pending + [i])
            pending, open_clause = [], True
        i += 1
    if pending and open_clause:
        groups[-1] += pending
    return groups


def span_scores(p: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """Each span's raw û: the highest of its words' p."""
    return np.array([float(np.max(p[g])) for g in groups]) if groups else np.zeros(0)
