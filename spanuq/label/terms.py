"""Does a key term (an entity, a number, a date, a short phrase) appear in a text?

Numbers must match exactly (``1,912`` = ``1912``; ``4th`` = ``4``); words match
fuzzily (rapidfuzz ``partial_ratio`` on lower-cased text, so "Ulaanbaatar" is
found in "Darya Ulaanbaatar" and "Shakespeare" in "Shakespeare's"); terms of
three letters or fewer must occur as a whole word ("Na" is not in "national").
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
    return re.compile(r"(?<!\w)" + re.escape(words) + r"(?!\w)", re.IGNORECASE)


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
