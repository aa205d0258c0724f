"""Views of scored spans, one module for every place that shows them: the terminal
(`spanuq score`), the standalone HTML page (`spanuq score --html`), the web page of
`spanuq serve` (its fragments come from `POST /render`) and the evaluate stage's PNG.

A span is anything with character offsets and a score: ``(char_start, char_end, u)``.
Colour runs from green (u = 0, confident) through amber to red (u = 1, likely wrong); with a
result's *flag threshold* (the calibrated û from which its spans are shown as likely wrong,
chosen on held-out answers for precision) the scale bends so that amber sits at the threshold:
only a span at or above it is drawn red (`shade`). The spans are listed most doubtful first.

The probe may keep two spans that overlap or nest ('Nobel Prize' and 'Prize in Chemistry':
their overlap is below the duplicate threshold), each with its own û.  Every view keeps them
apart: spans are laid out on *tracks* (`tracks`: no two spans of one track overlap).  Track 0
is drawn as a background highlight; a span on a later track is drawn as an underline in its
own colour, inside its own brackets (``{…}``, then ``⟨…⟩``).  The plain terminal view brackets
every span: ``[Nobel {Prize] in Chemistry}``.
"""
from __future__ import annotations

import html
import re
from typing import Sequence

Span = tuple[int, int, float]
BRACKETS = [("[", "]"), ("{", "}"), ("⟨", "⟩")]  # per track; later tracks reuse the last pair
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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


def _brackets(track: int) -> tuple[str, str]:
    return BRACKETS[min(track, len(BRACKETS) - 1)]


def _covered_runs(text: str, spans: Sequence[Span]) -> list[tuple[int, int, tuple[int, ...]]]:
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


def _rgb_at(u: float, flag: float | None) -> str:
    return ";".join(map(str, shade(u, flag)))


def _rgb(u: float) -> str:
    return ";".join(map(str, colour(u)))


def _marks(spans: Sequence[Span], track: list[int], colour_on: bool, every: bool,
           flag: float | None = 0.5) -> dict[int, list[str]]:
    """The brackets inserted before character i: closing ones (inner first), then opening ones.
    ``every``: bracket track-0 spans too (the plain view); otherwise only the later tracks."""
    closing: dict[int, list[tuple[int, str]]] = {}
    opening: dict[int, list[tuple[int, str]]] = {}
    for k, (start, end, u) in enumerate(spans):
        if track[k] == 0 and not every:
            continue
        left, right = _brackets(track[k])
        if colour_on:
            left, right = (f"\x1b[1m\x1b[38;2;{_rgb_at(u, flag)}m{c}\x1b[0m" for c in (left, right))
        closing.setdefault(end, []).append((track[k], right))
        opening.setdefault(start, []).append((track[k], left))
    out: dict[int, list[str]] = {}
    for i in set(closing) | set(opening):
        out[i] = ([c for _, c in sorted(closing.get(i, []), reverse=True)]
                  + [c for _, c in sorted(opening.get(i, []))])
    return out


def to_terminal(text: str, spans: Sequence[Span], colour_on: bool = True, flag: float | None = 0.5) -> str:
    """The answer with its spans marked.  Colour (amber at ``flag``, `shade`): track 0 on its ANSI
    24-bit background colour, later tracks underlined in their colour (SGR 58) inside their
    brackets.  Plain: every span in brackets."""
    spans = list(spans)
    track = tracks(spans)
    marks = _marks(spans, track, colour_on, not colour_on, flag)
    out: list[str] = []
    for a, b, ks in _covered_runs(text, spans):
        out.extend(marks.get(a, []))
        chunk = text[a:b]
        if not colour_on or not ks:
            out.append(chunk)
            continue
        style = ""
        first = [k for k in ks if track[k] == 0]
        if first:
            style += f"\x1b[48;2;{_rgb_at(spans[first[0]][2], flag)}m\x1b[38;2;0;0;0m"
        later = [k for k in ks if track[k] > 0]
        if later:
            style += f"\x1b[4m\x1b[58;2;{_rgb_at(max(spans[k][2] for k in later), flag)}m"
        out.append(f"{style}{chunk}\x1b[0m")
    out.extend(marks.get(len(text), []))
    return "".join(out)


def tip(u: float, meaning: str | None, flag: float | None) -> str:
    """A span's tooltip: its û and what that number is (``meaning``, per answer source: `TIP`)."""
    line = f"û = {u:.2f}" + (f": {meaning}" if meaning else "")
    return line + (f" (likely wrong: û ≥ {flag:.2f})" if likely_wrong(u, flag) else "")


def to_html(text: str, spans: Sequence[Span], title: str | None = None, flag: float | None = 0.5,
            meaning: str | None = None) -> str:
    """An HTML fragment; hover a span for its score and what it means (``meaning``, `tip`).  Each
    highlighted run carries ``data-spans`` (the indices of the spans covering it) and ``data-u``
    (their scores); a track-0 span is its background, a later-track span a 3px underline in its
    colour (``border-bottom``, then ``border-top``); red from ``flag`` on (`shade`)."""
    spans = list(spans)
    track = tracks(spans)
    parts = []
    for a, b, ks in _covered_runs(text, spans):
        chunk = html.escape(text[a:b])
        if not ks:
            parts.append(chunk)
            continue
        style = []
        for k in ks:
            r, g, bl = shade(spans[k][2], flag)
            if track[k] == 0:
                style.append(f"background:rgba({r},{g},{bl},0.55)")
            else:
                side = "bottom" if track[k] == 1 else "top"
                style.append(f"border-{side}:3px solid rgb({r},{g},{bl})")
        us = " ".join(f"{spans[k][2]:.4f}" for k in ks)
        tips = html.escape("; ".join(tip(spans[k][2], meaning, flag) for k in ks))
        parts.append(f'<span class="uq" style="{";".join(style)}" data-spans="{" ".join(map(str, ks))}" '
                     f'data-u="{us}" title="{tips}">{chunk}</span>')
    head = f"<h3>{html.escape(title)}</h3>" if title else ""
    return (f'<div class="spanuq" style="font-family:sans-serif;line-height:1.9;max-width:46em;white-space:pre-wrap">'
            f'{head}<p>{"".join(parts)}</p></div>')


# ------------------------------------------------------------------ views of a ScoreResult
LEGEND = "û: 0 = the model would say this again, 1 = likely wrong"  # the scale's ends, any source
MEANING = {  # what û means, per answer source, in one line
    "generated": "û = chance the backbone would not say this again (its own answer)",
    "given": "û = chance this fact is wrong (an answer the backbone did not write; calibrated on planted errors)",
}
UNCALIBRATED_GIVEN = ("û = chance the backbone would not say this again, read as if it had written this answer "
                      "(this probe has no calibration for answers it did not write: high û is common, rank, do not read)")
TIP = {  # what a span's û is, in the few words of its tooltip, per answer source
    "generated": "chance the backbone would not say this again",
    "given": "chance this fact is wrong",
}
TIP_UNCALIBRATED = "read as if the backbone had written this answer (rank, do not read)"
NU_LINE = "ν: how sure the probe is of û itself (the precision of its Beta; higher = û is firmer)"
VALIDITY_LINE = "validity: how likely the probe's query found a real claim here (spans below the probe's cut are not shown)"
WITH_SOURCES = ("û with sources = chance the sources, as the backbone reads them, do not back this span "
                "(red: contradicted or not supported by them)")
HOW_TO_CHOOSE = "choose with --model shipped | DIR | models:/spanuq-<backbone>@champion"


def legend(result) -> str:
    """One line: what û means for this answer's source, and from where a span is shown as likely wrong."""
    meaning = MEANING.get(result.answer_source, LEGEND)
    if getattr(result, "context", None) is not None:
        return WITH_SOURCES + ("" if result.status == "scored" else
                               "; grey: SpanUQ could not judge this answer (why: below)")
    if result.answer_source == "given" and getattr(result, "calibration_source", "given") == "generated":
        return (f"{UNCALIBRATED_GIVEN}; red from û ≥ {result.flag_threshold:.2f}, the own answers' threshold"
                if result.status == "scored" else f"{UNCALIBRATED_GIVEN}; grey: SpanUQ could not judge this answer")
    if result.status != "scored":
        return f"{meaning}; grey: SpanUQ could not judge this answer (why: below), so no span is marked likely wrong"
    return (f"{meaning}; red = likely wrong, from û ≥ {result.flag_threshold:.2f} "
            "(chosen on held-out answers so that most red spans are wrong)")


def colour_bar(flag: float | None) -> str:
    """The colour scale of û as one HTML bar, 0 to 1: green to amber below the red line ``flag``, red at
    and above it, the line marked and labelled; grey (nothing judged) when ``flag`` is None."""
    if flag is None:
        return ('<span class="uq-bar" style="position:relative;width:16em;height:0.9em;display:inline-block;'
                f'vertical-align:middle;background:rgba({",".join(map(str, GREY))},0.6)"></span>')
    pct = 100 * min(1.0, max(0.0, flag))
    g, a, r = (",".join(map(str, colour(x))) for x in (0.0, 0.5, 1.0))
    return ('<span class="uq-scale" style="white-space:nowrap">0 <span class="uq-bar" style="position:relative;'
            'width:16em;height:0.9em;display:inline-block;vertical-align:middle;'
            f'background:linear-gradient(to right,rgba({g},0.55) 0%,rgba({a},0.55) {pct:.1f}%,rgba({r},0.55) {pct:.1f}%,'
            f'rgba({r},0.55) 100%)"><span class="uq-line" data-flag="{flag:.4f}" style="position:absolute;'
            f'left:{pct:.1f}%;top:-0.25em;bottom:-0.25em;border-left:2px solid #000"></span></span> 1 '
            f'<small>red line û = {flag:.2f}: likely wrong at or above it</small></span>')


def tip_meaning(result) -> str | None:
    """What a span's û means for this result's answer source, in a tooltip's words; None when unverified."""
    if result.status != "scored":
        return None
    if result.answer_source == "given" and getattr(result, "calibration_source", "given") == "generated":
        return TIP_UNCALIBRATED
    return TIP.get(result.answer_source)


def result_spans(result) -> list[Span]:
    """(start, end, û) of a `spanuq.score.schema.ScoreResult`'s spans."""
    return [(s.start, s.end, s.u) for s in result.spans]


def judged_flag(result) -> float | None:
    """The likely-wrong threshold a view colours a result with; None (grey, nothing likely wrong) when
    SpanUQ could not judge the answer (``status`` unverified)."""
    return result.flag_threshold if result.status == "scored" else None


def likely_wrong(u: float, flag: float | None) -> bool:
    return flag is not None and u >= flag


def ranked(result) -> list:
    """The result's spans, most doubtful first (ties: in reading order)."""
    return sorted(result.spans, key=lambda s: (-s.u, s.start))


def against(s, flag: float | None) -> str:
    """What the sources say of a span scored with them: ``[id] states it: check`` / ``contradicted by [id]`` /
    ``not supported by the sources`` when it is shown as likely wrong, else ``read against [id]``; empty
    without sources."""
    if getattr(s, "passage", None) is None:
        return ""
    if likely_wrong(s.u, flag) and s.support == "stated":
        return f"[{s.passage}] states it: check"
    if likely_wrong(s.u, flag) and s.support == "contradicted":
        return f"contradicted by [{s.passage}]"
    if likely_wrong(s.u, flag):
        return "not supported by the sources"
    return f"read against [{s.passage}]"


def sources_lines(result) -> list[str]:
    """One line per passage the answer was read against: its id, title, characters read and windows."""
    if result.context is None:
        return []
    focused = ("; focused on the question: only the pieces most relevant to it were read"
               if result.context_focused else "")
    out = [f"sources ({result.context_windows} window{'s' * (result.context_windows != 1)}{focused}):"]
    for p in result.context:
        read = [r for r in result.context_read if r.id == p.id]
        where = ", ".join(f"{r.start}-{r.end}" + (f" (window {r.window})" if result.context_windows > 1 else "")
                          for r in read)
        text = p.text if len(p.text) <= 100 else p.text[:97] + "..."
        out.append(f"  [{p.id}] {p.title + ': ' if p.title else ''}{text!r}  read: chars {where or 'none'}")
    return out


def _chip(u: float, colour_on: bool, flag: float | None = 0.5) -> str:
    if not colour_on:
        return f"{u:.2f}"
    r, g, b = shade(u, flag)
    return f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m {u:.2f} \x1b[0m"


def terminal_view(result, colour_on: bool = True) -> str:
    """The answer with its spans coloured by û, a legend, then one line per span.
    ``colour_on=False``: plain text (spans marked ``[like this]``), for pipes and NO_COLOR."""
    spans = result_spans(result)
    flag = judged_flag(result)
    body = to_terminal(result.answer, spans, colour_on, flag)
    if colour_on:
        bar = "".join(f"\x1b[48;2;{_rgb(k / 19)}m \x1b[0m" for k in range(20))
        key = f"0 {bar} 1   {legend(result)}"
    else:
        key = legend(result)
    flagged = sum(likely_wrong(s.u, flag) for s in result.spans)
    lines = [body, "", key, f"{_useq(result)}   {len(spans)} span{'s' * (len(spans) != 1)}, {flagged} likely wrong   "
             f"{result.n_tokens} tokens" + ("   (stopped at max_new_tokens)" if result.truncated else "")]
    conformal = set(result.conformal.flagged) if result.conformal else set()
    index = {id(s): k for k, s in enumerate(result.spans)}
    if result.spans:
        lines.append("most doubtful first:")
    for s in ranked(result):
        mark = ("  likely wrong" if likely_wrong(s.u, flag) else "") + ("  above the conformal threshold"
                                                          if index[id(s)] in conformal else "")
        mark += f"  {against(s, flag)}" if against(s, flag) else ""
        lines.append(f"  {_chip(s.u, colour_on, flag)}  {s.text!r}  chars {s.start}-{s.end}  ν {s.nu:.1f}{mark}")
    if result.status == "unverified":
        lines.insert(0, "UNVERIFIED: SpanUQ could not judge this answer; do not read it as free of doubt")
        lines += [f"unverified ({r.code}): {r.message}" for r in result.status_reasons]
    if result.conformal:
        lines.append(conformal_line(result.conformal))
    lines += sources_lines(result)
    if result.probe:
        lines.append(probe_line(result.probe))
    return "\n".join(lines)


def _useq(result) -> str:
    return "no answer score (unverified)" if result.u_seq is None else f"answer score û_seq = {result.u_seq:.2f}"


def conformal_line(c) -> str:
    """What a conformal threshold keeps of one answer, in one line."""
    lam = "none" if c.threshold is None else f"{c.threshold:.3f}"
    what = ("the answer is held back as a whole" if c.abstain
            else f"{len(c.flagged)} span{'s' * (len(c.flagged) != 1)} above it")
    extra = f", δ = {c.delta:g}" if c.delta is not None else ""
    return f"conformal {c.guarantee} (α = {c.alpha:g}{extra}): threshold {lam}; {what} — {c.statement}"


def probe_line(probe: str) -> str:
    """Which probe scored, and how to choose another (every view says it)."""
    return f"probe: {probe}; {HOW_TO_CHOOSE}"


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
    r = update.result
    body = terminal_view(r, colour_on=False).split("\n\n" + legend(r))[0].replace("\n", " ")
    useq = "unverified" if r.u_seq is None else f"û_seq {r.u_seq:.2f}"
    return (f"[{update.n_generated:>3} tokens, {len(r.spans)} spans, {useq}"
            f"{', unverified' if r.status == 'unverified' and r.u_seq is not None else ''}"
            f"{', done' if update.done else ''}] {body}")


def fragment(result) -> str:
    """The HTML of one scored answer: highlighted text, û_seq, the legend, and the spans most doubtful
    first (``li.uq-item`` with ``data-i`` — the span's index in ``result.spans`` —, ``data-u``,
    ``data-likely-wrong``, ``data-start``, ``data-end``)."""
    flag = judged_flag(result)
    index = {id(s): k for k, s in enumerate(result.spans)}
    items = "".join(
        f'<li class="uq-item" data-i="{index[id(s)]}" data-u="{s.u:.4f}" data-likely-wrong="{str(likely_wrong(s.u, flag)).lower()}" '
        f'data-start="{s.start}" data-end="{s.end}">'
        f'<b style="background:rgba({",".join(map(str, shade(s.u, flag)))},0.55)">{s.u:.2f}</b> '
        f'{html.escape(s.text)}{" <em>likely wrong</em>" if likely_wrong(s.u, flag) else ""} '
        + (f'<span class="uq-against{" wrong" if likely_wrong(s.u, flag) else ""}" data-passage='
           f'"{html.escape(s.passage)}">{html.escape(against(s, flag))}</span> ' if s.passage is not None else "")
        + f'<small>(ν {s.nu:.1f}, validity {s.validity:.2f})</small></li>'
        for s in ranked(result))
    t = result.timings
    useq = ("no answer score" if result.u_seq is None
            else f"answer score û<sub>seq</sub> = <b class=\"useq\">{result.u_seq:.2f}</b>")
    meta = (f"{useq} · {len(result.spans)} spans · "
            f"{result.n_tokens} tokens · backbone {t.backbone_s:.2f} s, probe {t.probe_s:.3f} s"
            + (f", generation {t.generate_s:.2f} s" if t.generate_s is not None else ""))
    warnings = ""
    if result.status == "unverified":
        warnings = ('<p class="uq-warning uq-unverified" role="alert"><b>Unverified</b>: SpanUQ could not judge this '
                    'answer, so it is not free of doubt — '
                    + "; ".join(html.escape(r.message) for r in result.status_reasons) + "</p>")
    if result.conformal:
        warnings += f'<p class="meta uq-conformal">{html.escape(conformal_line(result.conformal))}</p>'
    probe = f'<p class="meta uq-probe">{html.escape(probe_line(result.probe))}</p>' if result.probe else ""
    key = (f'<p class="meta uq-key">{colour_bar(flag)}</p><p class="meta uq-legend">{html.escape(legend(result))}</p>'
           f'<p class="meta uq-terms">{html.escape(NU_LINE)}<br>{html.escape(VALIDITY_LINE)}</p>')
    answer = (f'{to_html(result.answer, result_spans(result), flag=flag, meaning=tip_meaning(result))}'
              f'<p class="meta">{meta}</p>{key}<ol class="uq-list">{items}</ol>')
    if result.context is not None:  # the sources beside the answer
        answer = (f'<div class="uq-grounded" style="display:flex;gap:1.5em;align-items:flex-start">'
                  f'<div style="flex:3;min-width:0">{answer}</div>{sources_html(result)}</div>')
    return f'<section class="spanuq-result">{warnings}{answer}{probe}</section>'


def sources_html(result) -> str:
    """The passages an answer was read against, each with its id and the characters read (``aside.uq-sources``)."""
    items = []
    for p in result.context:
        read = [r for r in result.context_read if r.id == p.id]
        where = ", ".join(f"{r.start}–{r.end}" for r in read)
        title = f"<b>{html.escape(p.title)}</b>: " if p.title else ""
        items.append(f'<li class="uq-source" data-id="{html.escape(p.id)}"><b>[{html.escape(p.id)}]</b> {title}'
                     f'{html.escape(p.text)} <small>(read: characters {where or "none"})</small></li>')
    windows = f" in {result.context_windows} windows" if result.context_windows > 1 else ""
    if result.context_focused:
        windows += " (focused on the question: the pieces most relevant to it)"
    return (f'<aside class="uq-sources" style="flex:2;min-width:0;font-size:0.9em;border-left:3px solid #ccc;'
            f'padding-left:1em"><h4 style="margin:0.6em 0">Sources read{windows}</h4>'
            f'<ul style="padding-left:1em;line-height:1.5">{"".join(items)}</ul></aside>')


def html_page(result) -> str:
    """A standalone HTML page of one scored answer (`spanuq score --html FILE`)."""
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>SpanUQ</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:50em}.prompt{color:#444}"
            "ol.uq-list{line-height:1.8}</style></head><body>"
            f"<p class=\"prompt\"><b>Prompt:</b> {html.escape(result.prompt)}</p>{fragment(result)}"
            "<p><small>Hover a span for its score and what it means.</small></p></body></html>")


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
