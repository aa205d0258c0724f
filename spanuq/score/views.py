"""Views of scored spans, one module for every place that shows them: the terminal
(`spanuq score`), the standalone HTML page (`spanuq score --html`), the web page of
`spanuq serve` (its fragments come from `POST /render`) and the evaluate stage's PNG.

A span is anything with character offsets and a score: ``(char_start, char_end, u)``.
Colour runs from green (u = 0, confident) through amber to red (u = 1, likely wrong).
Overlapping spans are drawn by their highest score per character.
"""
from __future__ import annotations

import html
import re
from typing import Iterable, Sequence

Span = tuple[int, int, float]


def _char_scores(text: str, spans: Iterable[Span]) -> list[float | None]:
    scores: list[float | None] = [None] * len(text)
    for start, end, u in spans:
        for i in range(max(0, start), min(len(text), end)):
            scores[i] = u if scores[i] is None else max(scores[i], u)
    return scores


def _runs(text: str, spans: Iterable[Span]) -> list[tuple[str, float | None]]:
    return [(chunk, s) for chunk, s, _ in _covered_runs(text, list(spans))]


def _covered_runs(text: str, spans: Sequence[Span]) -> list[tuple[str, float | None, tuple[int, ...]]]:
    """Maximal runs of characters covered by the same spans: (chunk, max score or None, span indices)."""
    cover: list[list[int]] = [[] for _ in text]
    for k, (start, end, _) in enumerate(spans):
        for i in range(max(0, start), min(len(text), end)):
            cover[i].append(k)
    runs: list[tuple[str, float | None, tuple[int, ...]]] = []
    for ch, ks in zip(text, cover):
        key = tuple(ks)
        if runs and runs[-1][2] == key:
            runs[-1] = (runs[-1][0] + ch, runs[-1][1], key)
        else:
            runs.append((ch, max((spans[k][2] for k in key), default=None), key))
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
    """An HTML fragment; hover a span for its score.  Each highlighted run carries
    ``data-spans`` (the indices of the spans covering it) and ``data-u`` (their scores)."""
    parts = []
    for chunk, s, ks in _covered_runs(text, list(spans)):
        if s is None:
            parts.append(html.escape(chunk))
        else:
            r, g, b = colour(s)
            us = " ".join(f"{spans[k][2]:.4f}" for k in ks)
            tip = "; ".join(f"u = {spans[k][2]:.2f}" for k in ks)
            parts.append(f'<span class="uq" style="background:rgba({r},{g},{b},0.55)" '
                         f'data-spans="{" ".join(map(str, ks))}" data-u="{us}" title="{tip}">{html.escape(chunk)}</span>')
    head = f"<h3>{html.escape(title)}</h3>" if title else ""
    return (f'<div class="spanuq" style="font-family:sans-serif;line-height:1.7;max-width:46em;white-space:pre-wrap">'
            f'{head}<p>{"".join(parts)}</p></div>')


# ------------------------------------------------------------------ views of a ScoreResult
LEGEND = "û: 0 = the model would say this again, 1 = likely wrong"


def result_spans(result) -> list[Span]:
    """(start, end, û) of a `spanuq.score.schema.ScoreResult`'s spans."""
    return [(s.start, s.end, s.u) for s in result.spans]


def _chip(u: float, colour_on: bool) -> str:
    if not colour_on:
        return f"{u:.2f}"
    r, g, b = colour(u)
    return f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m {u:.2f} \x1b[0m"


def terminal_view(result, colour_on: bool = True) -> str:
    """The answer with its spans coloured by û, a legend, then one line per span.
    ``colour_on=False``: plain text (spans marked ``[like this]``), for pipes and NO_COLOR."""
    spans = result_spans(result)
    if colour_on:
        body = to_terminal(result.answer, spans)
        bar = "".join(f"\x1b[48;2;{';'.join(map(str, colour(k / 19)))}m \x1b[0m" for k in range(20))
        legend = f"0 {bar} 1   {LEGEND}"
    else:
        marked: list[tuple[str, bool]] = []  # adjacent covered runs (overlapping spans) share one bracket
        for chunk, s in _runs(result.answer, spans):
            if marked and marked[-1][1] == (s is not None):
                marked[-1] = (marked[-1][0] + chunk, marked[-1][1])
            else:
                marked.append((chunk, s is not None))
        body = "".join(f"[{chunk}]" if covered else chunk for chunk, covered in marked)
        legend = LEGEND
    lines = [body, "", legend, f"answer score û_seq = {result.u_seq:.2f}   "
             f"{len(spans)} span{'s' * (len(spans) != 1)}   {result.n_tokens} tokens"
             + ("   (stopped at max_new_tokens)" if result.truncated else "")]
    for s in result.spans:
        lines.append(f"  {_chip(s.u, colour_on)}  {s.text!r}  chars {s.start}-{s.end}  ν {s.nu:.1f}")
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LiveTerminal:
    """Redraws a block of text in place on a terminal (`spanuq score --stream`): each ``draw`` moves the
    cursor back over the rows the previous block took (wrapped lines included) and clears them."""

    def __init__(self, stream):
        self.stream, self.rows = stream, 0

    def draw(self, text: str) -> None:
        import shutil

        cols = max(1, shutil.get_terminal_size().columns)
        back = f"\x1b[{self.rows}F\x1b[J" if self.rows else ""
        self.stream.write(back + text + "\n")
        self.stream.flush()
        self.rows = sum(max(1, -(-len(ANSI.sub("", line)) // cols)) for line in text.split("\n"))


def stream_line(update) -> str:
    """One plain line per streamed update (piped output): tokens so far, spans, û_seq, the answer with [spans]."""
    body = terminal_view(update.result, colour_on=False).split("\n\n" + LEGEND)[0].replace("\n", " ")
    return (f"[{update.n_generated:>3} tokens, {len(update.result.spans)} spans, û_seq {update.result.u_seq:.2f}"
            f"{', done' if update.done else ''}] {body}")


def fragment(result) -> str:
    """The HTML of one scored answer: highlighted text, û_seq, and a list of the spans
    (``li.uq-item`` with ``data-i``, ``data-u``, ``data-start``, ``data-end``)."""
    items = "".join(
        f'<li class="uq-item" data-i="{k}" data-u="{s.u:.4f}" data-start="{s.start}" data-end="{s.end}">'
        f'<b style="background:rgba({",".join(map(str, colour(s.u)))},0.55)">{s.u:.2f}</b> '
        f'{html.escape(s.text)} <small>(ν {s.nu:.1f}, validity {s.validity:.2f})</small></li>'
        for k, s in enumerate(result.spans))
    t = result.timings
    meta = (f"answer score û<sub>seq</sub> = <b class=\"useq\">{result.u_seq:.2f}</b> · {len(result.spans)} spans · "
            f"{result.n_tokens} tokens · backbone {t.backbone_s:.2f} s, probe {t.probe_s:.3f} s"
            + (f", generation {t.generate_s:.2f} s" if t.generate_s is not None else ""))
    warnings = "".join(f'<p class="uq-warning" role="alert">warning: {html.escape(w)}</p>' for w in result.warnings)
    return (f'<section class="spanuq-result">{warnings}{to_html(result.answer, result_spans(result))}'
            f'<p class="meta">{meta}</p><ol class="uq-list">{items}</ol></section>')


def html_page(result) -> str:
    """A standalone HTML page of one scored answer (`spanuq score --html FILE`)."""
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>SpanUQ</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:50em}.prompt{color:#444}"
            "ol.uq-list{line-height:1.8}</style></head><body>"
            f"<p class=\"prompt\"><b>Prompt:</b> {html.escape(result.prompt)}</p>{fragment(result)}"
            f"<p><small>{html.escape(LEGEND)}; hover a span for its score.</small></p></body></html>")


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

    rows: list[tuple[str, object]] = []  # ("title", str) | ("text", (text, scores, ends, a, b)) | ("gap", None)
    for title, text, spans in items:
        text = text.replace("\n", " ")
        scores = _char_scores(text, spans)
        ends: dict[int, float] = {}
        for start, end, u in spans:  # the score label goes after the span's last character
            if 0 < end <= len(text):
                ends[end - 1] = max(u, ends.get(end - 1, u))
        rows.append(("title", title))
        rows.extend(("text", (text, scores, ends, a, b)) for a, b in wrap(text, width_chars))
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
            text, scores, ends, a, b = row
            i = a
            while i < b:  # one rectangle per run of equal score (no seams between characters)
                j = i
                while j < b and scores[j] == scores[i]:
                    j += 1
                if scores[i] is not None:
                    r, g, bl = colour(scores[i])
                    ax.add_patch(Rectangle((x0 + (i - a) * pt_per_char, y - 0.4 * line_pt), (j - i) * pt_per_char,
                                           0.72 * line_pt, lw=0, color=(r / 255, g / 255, bl / 255), alpha=0.6))
                i = j
            for i in range(a, b):  # characters placed one by one, so text and colour stay aligned
                x = x0 + (i - a) * pt_per_char
                if not text[i].isspace():
                    ax.text(x + pt_per_char / 2, y, text[i], fontsize=10, family="DejaVu Sans Mono", va="center",
                            ha="center")
                if i in ends:
                    ax.text(x + pt_per_char, y - 0.42 * line_pt, f"{ends[i]:.2f}", fontsize=5.5,
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
