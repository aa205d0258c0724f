"""The PNG view of the evaluate stage: scored answers drawn into one image (matplotlib)."""
from __future__ import annotations

from typing import Sequence

from .colours import Span, colour, tracks


def wrap(text: str, width: int) -> list[tuple[int, int]]:
    """Character ranges [start, end) of the lines of ``text`` wrapped at spaces to ``width``."""
    lines, start = [], 0
    while start < len(text):
        if len(text) - start <= width:
            lines.append((start, len(text)))
            break
        cut = text.rfind(" ", start, start + width + 1)
        if cut <= start:  # one word longer than a line: break it
            cut = start + width
        lines.append((start, cut))
        start = cut + 1 if text[cut] == " " else cut
    return lines


def to_png(items: Sequence[tuple[str, str, Sequence[Span]]], path: str, width_chars: int = 92) -> None:
    """(title, text, spans) items drawn into one PNG: wrapped monospace text, each span's
    characters on its colour, its score in small type where it ends, and a colour key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows: list[tuple[str, object]] = []  # ("title", str) | ("text", (text, spans, track, ends, a, b)) | ("gap", None)
    for title, text, spans in items:
        text = text.replace("\n", " ")
        spans = list(spans)
        track = tracks(spans)
        ends: dict[int, list[float]] = {}
        for start, end, u in spans:  # each span's score goes after its last character
            if 0 < end <= len(text):
                ends.setdefault(end - 1, []).append(u)
        rows.append(("title", title))
        rows.extend(("text", (text, spans, track, ends, a, b)) for a, b in wrap(text, width_chars))
        rows.append(("gap", None))
    rows.append(("key", None))
    pt_per_char, line_pt = 6.0, 21.0  # DejaVu Sans Mono at 10 pt advances 0.6 em
    width_pt = (width_chars + 4) * pt_per_char
    height_pt = line_pt * (len(rows) + 1)
    fig = plt.figure(figsize=(width_pt / 72, height_pt / 72), dpi=130)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width_pt)
    ax.set_ylim(height_pt, 0)
    ax.axis("off")
    x0, y = 2 * pt_per_char, line_pt
    for kind, row in rows:
        if kind == "title":
            ax.text(x0, y, row, fontsize=10, fontweight="bold", family="DejaVu Sans", va="center")
        elif kind == "text":
            text, spans, track, ends, a, b = row
            for (start, end, u), t in zip(spans, track):  # track 0 behind the text, later tracks as underlines
                lo, hi = max(a, start), min(b, end)
                if lo >= hi:
                    continue
                r, g, bl = colour(u)
                x, w = x0 + (lo - a) * pt_per_char, (hi - lo) * pt_per_char
                if t == 0:
                    ax.add_patch(Rectangle((x, y - 0.4 * line_pt), w, 0.72 * line_pt, lw=0,
                                           color=(r / 255, g / 255, bl / 255), alpha=0.6))
                else:
                    ax.add_patch(Rectangle((x, y + (0.26 + 0.1 * t) * line_pt), w, 0.08 * line_pt, lw=0,
                                           color=(r / 255, g / 255, bl / 255)))
            for i in range(a, b):  # characters placed one by one, so text and colour stay aligned
                x = x0 + (i - a) * pt_per_char
                if not text[i].isspace():
                    ax.text(x + pt_per_char / 2, y, text[i], fontsize=10, family="DejaVu Sans Mono", va="center",
                            ha="center")
                if i in ends:
                    ax.text(x + pt_per_char, y - 0.42 * line_pt, " ".join(f"{u:.2f}" for u in ends[i]), fontsize=5.5,
                            family="DejaVu Sans", va="center", ha="left", color="#333333")
        elif kind == "key":
            steps = 40
            for k in range(steps):
                r, g, bl = colour(k / (steps - 1))
                ax.add_patch(Rectangle((x0 + 14 * pt_per_char + k * 3, y - 0.3 * line_pt), 3, 0.6 * line_pt, lw=0,
                                       color=(r / 255, g / 255, bl / 255), alpha=0.6))
            ax.text(x0, y, "span score û:", fontsize=8, family="DejaVu Sans", va="center")
            ax.text(x0 + 14 * pt_per_char - 4, y, "0", fontsize=8, family="DejaVu Sans", va="center", ha="right")
            ax.text(x0 + 14 * pt_per_char + steps * 3 + 4, y, "1   (0 = consistent, 1 = likely wrong)", fontsize=8,
                    family="DejaVu Sans", va="center")
        y += line_pt
    fig.savefig(path)
    plt.close(fig)
