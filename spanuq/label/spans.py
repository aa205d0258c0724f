"""Anchoring claim spans in the answer text: exact, then case-insensitive, then fuzzy.

A judge asked for "the exact span" sometimes paraphrases it or changes its case.
`anchor_span` finds it anyway and snaps the result to whole words; a span that
matches nothing well enough (``min_score``, rapidfuzz 0-100) is rejected.
"""
from __future__ import annotations

from dataclasses import dataclass

from rapidfuzz import fuzz

_EDGE_PUNCT = " \t\n\r,;:.!?\"'“”‘’()[]-–—"


@dataclass(frozen=True)
class Anchor:
    start: int
    end: int  # exclusive
    repaired: bool  # found only by case-insensitive or fuzzy matching
    score: float = 100.0


def _lower_same_length(text: str) -> str:
    """Lower-case without changing any offset (a few characters grow when lower-cased)."""
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def snap_to_words(text: str, start: int, end: int) -> tuple[int, int]:
    """Grow [start, end) to whole words, then trim spaces and edge punctuation."""
    while start > 0 and text[start - 1].isalnum() and start < len(text) and text[start].isalnum():
        start -= 1
    while end < len(text) and end > 0 and text[end].isalnum() and text[end - 1].isalnum():
        end += 1
    while start < end and text[start] in _EDGE_PUNCT:
        start += 1
    while end > start and text[end - 1] in _EDGE_PUNCT:
        end -= 1
    return start, end


def anchor_span(text: str, span: str, min_score: float = 80.0, min_chars: int = 1) -> Anchor | None:
    """Where `span` sits in `text`; None when it cannot be found well enough."""
    span = span.strip(_EDGE_PUNCT) or span.strip()
    if len(span) < min_chars or not text:
        return None
    i = text.find(span)
    if i >= 0:
        return Anchor(i, i + len(span), repaired=False)
    low_text, low_span = _lower_same_length(text), _lower_same_length(span)
    i = low_text.find(low_span)
    if i >= 0:
        return Anchor(i, i + len(span), repaired=True)
    al = fuzz.partial_ratio_alignment(low_span, low_text)
    if al is None or al.score < min_score:
        return None
    # when the span is longer than the text, rapidfuzz aligns the other way round
    start, end = (al.dest_start, al.dest_end) if len(low_span) <= len(low_text) else (0, len(text))
    start, end = snap_to_words(text, start, end)
    if end - start < min_chars:
        return None
    return Anchor(start, end, repaired=True, score=float(al.score))
