"""Does a key term (an entity, a number, a date, a short phrase) appear in a text?

Numbers must match exactly (``1,912`` = ``1912``; ``4th`` = ``4``); words match
fuzzily (rapidfuzz ``partial_ratio`` on lower-cased text, so "Ulaanbaatar" is
found in "Darya Ulaanbaatar" and "Shakespeare" in "Shakespeare's"); terms of three
characters or fewer must occur as a whole word ("Na" is not in "national"), and
one written with capitals ("Na", "UK", "He") matches with its case, so the
symbol "He" is not found in "he said".

`key_terms` and `terms_agree` make claim matching contradiction-aware: two claims
are only equivalent when the numbers, dates and names of the first all occur in
the second ("born 1879" does not match "born 1880", "the capital is Canberra"
does not match "the capital is Sydney"), whatever a similarity model says.
`is_prompt_copy` tells a span that merely repeats the prompt ("Marie Curie" for
"Who was Marie Curie?"): it asserts nothing the user did not say.
"""
from __future__ import annotations

import re
from functools import lru_cache

from rapidfuzz import fuzz

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:st|nd|rd|th)?", re.IGNORECASE)
_ORDINAL = re.compile(r"(st|nd|rd|th)$", re.IGNORECASE)
_ARTICLE = re.compile(r"^(the|a|an)\s+", re.IGNORECASE)


def numbers_in(text: str) -> set[str]:
    """Normalised numbers: thousands separators and ordinal suffixes removed."""
    out = set()
    for m in _NUMBER.finditer(text):
        n = _ORDINAL.sub("", m.group()).replace(",", "")
        out.add(n.rstrip(".") or n)
    return out


def words_of(term: str) -> str:
    """The term without its numbers and edge punctuation ("the 20th century" → "century")."""
    words = re.sub(r"\s+", " ", _NUMBER.sub(" ", term)).strip(" ,.;:-()'\"")
    return _ARTICLE.sub("", words)


@lru_cache(maxsize=4096)
def _word_pattern(words: str) -> re.Pattern:
    """Whole-word pattern; case-sensitive for a short term that carries capitals ("He", "UK")."""
    case = len(words) <= 3 and any(c.isupper() for c in words)
    return re.compile(r"(?<!\w)" + re.escape(words) + r"(?!\w)", 0 if case else re.IGNORECASE)


class TextIndex:
    """A text prepared once for many term look-ups."""

    def __init__(self, text: str):
        self.text = text
        self.lower = text.lower()
        self.numbers = numbers_in(text)

    def contains(self, term: str, min_score: float = 85.0) -> bool:
        nums = numbers_in(term)
        if nums and not nums <= self.numbers:
            return False
        words = words_of(term)
        if len(words) < 2:  # a bare number (or punctuation)
            return bool(nums)
        if len(words) <= 3:
            return _word_pattern(words).search(self.text) is not None
        return fuzz.partial_ratio(words.lower(), self.lower) >= min_score


def is_prompt_copy(span: str, prompt: str, min_score: float = 85.0) -> bool:
    """Does the span only repeat the prompt (every number and word of it occurs there)?"""
    if not words_of(span) and not numbers_in(span):
        return False
    return TextIndex(prompt).contains(span, min_score)


def key_terms(doc, exempt: str = "") -> tuple[str, ...]:
    """The numbers, dates and named entities of a parsed claim (spaCy ``Doc``), minus
    those that occur in ``exempt`` (the prompt: its subject is context, not content)."""
    ctx = TextIndex(exempt) if exempt else None
    terms = [e.text for e in doc.ents if e.label_ != "ORDINAL"]
    terms += [t.text for t in doc if t.like_num and not t.ent_type_]
    out = []
    for term in terms:
        term = term.strip(" ,.;:'\"")
        if term and term not in out and not (ctx is not None and ctx.contains(term)):
            out.append(term)
    return tuple(out)


def terms_agree(terms: tuple[str, ...], candidate: "TextIndex | str", min_score: float = 85.0) -> bool:
    """Every key term of a claim occurs in the candidate text."""
    ix = candidate if isinstance(candidate, TextIndex) else TextIndex(candidate)
    return all(ix.contains(t, min_score) for t in terms)
