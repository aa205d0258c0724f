"""Views of scored spans: ANSI terminal text, a self-contained HTML snippet, a PNG.

A span is anything with character offsets and a score: ``(char_start, char_end, u)``.
Colour runs from green (u = 0, confident) through amber to red (u = 1, likely wrong).
Overlapping spans are drawn by their highest score per character.
"""
from __future__ import annotations

import html
from typing import Iterable, Sequence

Span = tuple[int, int, float]


def _char_scores(text: str, spans: Iterable[Span]) -> list[float | None]:
    scores: list[float | None] = [None] * len(text)
    for start, end, u in spans:
        for i in range(max(0, start), min(len(text), end)):
            scores[i] = u if scores[i] is None else max(scores[i], u)
    return scores


def _runs(text: str, spans: Iterable[Span]) -> list[tuple[str, float | None]]:
    scores = _char_scores(text, spans)
    runs: list[tuple[str, float | None]] = []
    for ch, s in zip(text, scores):
        if runs and runs[-1][1] == s:
            runs[-1] = (runs[-1][0] + ch, s)
        else:
            runs.append((ch, s))
    return runs


def colour(u: float) -> tuple[int, int, int]:
    """Green (0) → amber (0.5) → red (1)."""
    u = min(1.0, max(0.0, u))
    if u < 0.5:
        t = u / 0.5
        return int(46 + t * (240 - 46)), int(160 + t * (173 - 160)), int(67 + t * (78 - 67))
    t = (u - 0.5) / 0.5
    return int(240 + t * (211 - 240)), int(173 - t * (173 - 47)), int(78 - t * (78 - 47))


def to_terminal(text: str, spans: Sequence[Span]) -> str:
    """ANSI 24-bit background colours, with the score after each span."""
    out = []
    for chunk, s in _runs(text, spans):
        if s is None:
            out.append(chunk)
        else:
            r, g, b = colour(s)
            out.append(f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m{chunk}\x1b[0m")
    return "".join(out)


def to_html(text: str, spans: Sequence[Span], title: str | None = None) -> str:
    """An HTML fragment; hover a span for its score."""
    parts = []
    for chunk, s in _runs(text, spans):
        if s is None:
            parts.append(html.escape(chunk))
        else:
            r, g, b = colour(s)
            parts.append(f'<span class="uq" style="background:rgba({r},{g},{b},0.55)" '
                         f'title="u = {s:.2f}">{html.escape(chunk)}</span>')
    head = f"<h3>{html.escape(title)}</h3>" if title else ""
    return (f'<div class="spanuq" style="font-family:sans-serif;line-height:1.7;max-width:46em">'
            f'{head}<p>{"".join(parts)}</p></div>')


def to_png(items: Sequence[tuple[str, str, Sequence[Span]]], path: str, width_chars: int = 92) -> None:
    """Render (title, text, spans) items into one PNG with matplotlib (wrapped text, coloured spans)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    lines: list[list[tuple[str, float | None]] | str] = []
    for title, text, spans in items:
        lines.append(title)
        row: list[tuple[str, float | None]] = []
        n = 0
        for chunk, s in _runs(text.replace("\n", " "), spans):
            for word in chunk.split(" "):
                piece = word + " "
                if n + len(piece) > width_chars and row:
                    lines.append(row)
                    row, n = [], 0
                row.append((piece, s))
                n += len(piece)
        if row:
            lines.append(row)
        lines.append([])
    ch_w, ln_h = 0.0085, 1.0 / max(len(lines) + 1, 1)
    fig = plt.figure(figsize=(width_chars * 0.105, 0.3 * (len(lines) + 1)), dpi=120)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.axis("off")
    y = 1 - ln_h
    for line in lines:
        if isinstance(line, str):
            ax.text(0.01, y, line, fontsize=10, fontweight="bold", family="DejaVu Sans", va="center")
        else:
            x = 0.01
            for piece, s in line:
                w = len(piece) * ch_w * 1.0
                if s is not None:
                    r, g, b = colour(s)
                    ax.add_patch(Rectangle((x, y - ln_h * 0.42), w, ln_h * 0.84, color=(r / 255, g / 255, b / 255),
                                           alpha=0.55, lw=0))
                ax.text(x, y, piece, fontsize=10, family="DejaVu Sans Mono", va="center")
                x += w
        y -= ln_h
    fig.savefig(path)
    plt.close(fig)
