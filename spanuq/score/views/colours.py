"""Where a view draws spans and in which colour: tracks for spans that overlap, green → amber → red by û.

A span is anything with character offsets and a score: ``(char_start, char_end, u)``.  Colour runs from green
(u = 0, confident) through amber to red (u = 1, likely wrong); with a result's *flag threshold* the scale bends so
that amber sits at the threshold: only a span at or above it is drawn red (`shade`).  Overlapping or nested spans
are laid out on *tracks* (`tracks`: no two spans of one track overlap), each later track inside its own brackets.
"""
from __future__ import annotations

from typing import Sequence


Span = tuple[int, int, float]
BRACKETS = [("[", "]"), ("{", "}"), ("⟨", "⟩")]  # per track; later tracks reuse the last pair


def tracks(spans: Sequence[Span]) -> list[int]:
    """The track of each span: the first track whose spans all end at or before it starts
    (spans visited by start, longer first), so overlapping spans never share a track."""
    order = sorted(range(len(spans)), key=lambda k: (spans[k][0], -spans[k][1]))
    ends: list[int] = []  # the last end on each track
    out = [0] * len(spans)
    for k in order:
        start, end, _ = spans[k]
        t = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if t == len(ends):
            ends.append(end)
        else:
            ends[t] = end
        out[k] = t
    return out


def brackets(track: int) -> tuple[str, str]:
    return BRACKETS[min(track, len(BRACKETS) - 1)]


def covered_runs(text: str, spans: Sequence[Span]) -> list[tuple[int, int, tuple[int, ...]]]:
    """Maximal runs [a, b) of characters covered by the same spans (indices, in span order)."""
    cover: list[list[int]] = [[] for _ in text]
    for k, (start, end, _) in enumerate(spans):
        for i in range(max(0, start), min(len(text), end)):
            cover[i].append(k)
    runs: list[tuple[int, int, tuple[int, ...]]] = []
    for i, ks in enumerate(cover):
        key = tuple(ks)
        if runs and runs[-1][2] == key and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1, key)
        else:
            runs.append((i, i + 1, key))
    return runs


def colour(u: float) -> tuple[int, int, int]:
    """Green (0) → amber (0.5) → red (1)."""
    u = min(1.0, max(0.0, u))
    if u < 0.5:
        t = u / 0.5
        return int(46 + t * (240 - 46)), int(160 + t * (173 - 160)), int(67 + t * (78 - 67))
    t = (u - 0.5) / 0.5
    return int(240 + t * (211 - 240)), int(173 - t * (173 - 47)), int(78 - t * (78 - 47))


def position(u: float, flag: float = 0.5) -> float:
    """Where û sits on the colour scale when ``flag`` is the red line: [0, flag) → green to amber
    ([0, 0.5)), [flag, 1] → red (1): every span the legend calls likely wrong is drawn red."""
    u, flag = min(1.0, max(0.0, u)), min(0.999, max(0.001, flag))
    return 0.5 * u / flag if u < flag else 1.0


GREY = (200, 200, 200)  # spans of an answer SpanUQ could not judge (unverified): no colour claims anything


def shade(u: float, flag: float | None = 0.5) -> tuple[int, int, int]:
    """The colour of û: green to amber below the flag threshold, red at or above it (likely wrong); grey
    when ``flag`` is None (an unverified answer)."""
    return GREY if flag is None else colour(position(u, flag))
