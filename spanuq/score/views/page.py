"""The HTML views: a fragment of one scored answer (the web page of `spanuq serve` gets it from ``POST /render``),
the sources beside it, and the standalone page of `spanuq score --html`."""
from __future__ import annotations

import html
from typing import Sequence

from .colours import GREY, Span, colour, covered_runs, shade, tracks
from .legend import NU_LINE, against, conformal_line, judged_flag, legend, likely_wrong, probe_line, \
    ranked, result_spans, tip_meaning, validity_line


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
    for a, b, ks in covered_runs(text, spans):
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
        + (f'<small>(ν {s.nu:.1f}, validity {s.validity:.2f})</small></li>' if s.nu is not None else '</li>')
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
           f'<p class="meta uq-terms">{html.escape(NU_LINE)}<br>{html.escape(validity_line(result))}</p>')
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
