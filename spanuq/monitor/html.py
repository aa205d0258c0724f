"""``report.html`` of `spanuq monitor`: one self-contained page (inline SVG, no script, no network)."""
from __future__ import annotations

import html

from ..score.views import colour, to_html
from .report import threshold_text

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:64em;color:#222;padding:0 1em}
h1{margin-bottom:.2em} h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.cards{display:flex;gap:1em;flex-wrap:wrap;margin:1em 0}
.card{border:1px solid #ddd;border-radius:8px;padding:.7em 1em;min-width:9em}
.card b{display:block;font-size:1.7em} .card small{color:#666}
table{border-collapse:collapse;margin:.5em 0 1em} td,th{padding:.25em .7em;text-align:left;border-bottom:1px solid #eee}
th{font-weight:600;background:#fafafa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;height:.8em;background:#d64545;vertical-align:middle;border-radius:2px}
.hists{display:flex;gap:1.5em;flex-wrap:wrap} figure{margin:0} figcaption{font-size:.9em;color:#444}
.answer{border:1px solid #eee;border-radius:6px;padding:.5em 1em;margin:.6em 0}
.answer .q{color:#555;font-size:.92em} .unverified{background:#fff6e0;border-color:#f0c36d}
.note{color:#555;font-size:.92em}
"""


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def svg_histogram(h: dict, title: str, width: int = 300, height: int = 150) -> str:
    counts, edges = h["counts"], h["edges"]
    top = max(counts) or 1
    pad, bw = 24, (width - 30) / len(counts)
    bars = []
    for i, c in enumerate(counts):
        bh = (height - pad - 10) * c / top
        x, y = 28 + i * bw, height - pad - bh
        r, g, b = colour((edges[i] + edges[i + 1]) / 2)
        bars.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw - 1:.1f}" height="{bh:.1f}" fill="rgb({r},{g},{b})">'
                    f'<title>{edges[i]:.2f}–{edges[i + 1]:.2f}: {c}</title></rect>')
    axis = (f'<line x1="27" y1="{height - pad}" x2="{width}" y2="{height - pad}" stroke="#888"/>'
            f'<text x="28" y="{height - 8}" font-size="10">0</text>'
            f'<text x="{28 + len(counts) * bw / 2 - 8:.0f}" y="{height - 8}" font-size="10">0.5</text>'
            f'<text x="{width - 10}" y="{height - 8}" font-size="10">1</text>'
            f'<text x="0" y="12" font-size="10">{top}</text>')
    return (f'<figure><svg width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">'
            f'{"".join(bars)}{axis}</svg><figcaption>{html.escape(title)} (n = {h["n"]})</figcaption></figure>')


def _rates_row(label: str, g: dict) -> str:
    ci, share, useq = g.get("share_uncertain_ci95"), g["share_uncertain"], g["mean_u_seq"]
    bar = f'<span class="bar" style="width:{round(100 * share)}px"></span> ' if share is not None else ""
    interval = f"{_pct(ci[0])} – {_pct(ci[1])}" if ci else ""
    return (f"<tr><td>{html.escape(label)}</td><td class=num>{g['n']}</td><td>{bar}{_pct(share)}</td>"
            f"<td class=num>{interval}</td><td class=num>{'—' if useq is None else f'{useq:.2f}'}</td>"
            f"<td class=num>{g['unverified']}</td></tr>")


HEAD = ("<tr><th>{}</th><th>answers</th><th>with an uncertain span</th><th>95% interval</th><th>mean û<sub>seq</sub>"
        "</th><th>unverified</th></tr>")


def render(report: dict) -> str:
    m, o, st = report["meta"], report["overall"], report["status"]
    cards = [("answers", m["rows"], f"from {html.escape(str(m.get('file', '')))}"),
             ("with an uncertain span", _pct(o["share_uncertain"]),
              f"of {o['scored']} scored; {html.escape(threshold_text(m['threshold']))}"),
             ("unverified", st["unverified"], "could not be judged"),
             ("errors", m["errors"], "rows not scored")]
    parts = [f"<h1>SpanUQ monitoring report</h1><p class=note>{html.escape(m.get('probe', ''))}<br>"
             f"threshold: {html.escape(threshold_text(m['threshold'], 4))} ({html.escape(m.get('threshold_source', ''))}) · "
             f"{m.get('scored_now', 0)} answers scored in this run, {m.get('cache_hits', 0)} from the cache · "
             f"{html.escape(str(m.get('date', '')))}</p>",
             '<div class="cards">' + "".join(f'<div class="card"><b>{v}</b>{html.escape(k)}<br><small>{d}</small>'
                                              f"</div>" for k, v, d in cards) + "</div>"]
    if st["reasons"]:
        parts.append("<h2>Unverified answers</h2><p class=note>SpanUQ could not judge these answers; they are not "
                     "counted as clean.</p><table><tr><th>reason</th><th>answers</th></tr>"
                     + "".join(f"<tr><td><code>{html.escape(k)}</code></td><td class=num>{v}</td></tr>"
                               for k, v in sorted(st["reasons"].items(), key=lambda kv: -kv[1])) + "</table>")
    h = report["histograms"]
    parts.append("<h2>Distributions</h2><div class=hists>" + svg_histogram(h["span_u"], "û of every span")
                 + svg_histogram(h["max_u"], "highest û per answer") + svg_histogram(h["u_seq"], "û_seq per answer")
                 + "</div>")
    for col, groups in report["groups"].items():
        parts.append(f"<h2>By {html.escape(col)}</h2><table>{HEAD.format(html.escape(col))}"
                     + "".join(_rates_row(g["value"], g) for g in groups) + "</table>")
    if report["doubtful"]:
        parts.append("<h2>The most doubtful answers</h2>")
        for d in report["doubtful"]:
            spans = [(s["start"], s["end"], s["u"]) for s in d["spans"]]
            tags = " · ".join(f"{html.escape(k)}: {html.escape(v)}" for k, v in d["columns"].items())
            parts.append(f'<div class="answer"><p class="q"><b>line {d["line"]}</b>'
                         f'{" (" + html.escape(d["id"]) + ")" if d["id"] else ""} · highest û {d["max_u"]:.2f} · '
                         f'û<sub>seq</sub> {d["u_seq"]:.2f}{" · " + tags if tags else ""}<br>'
                         f'Q: {html.escape(d["prompt"])}</p>{to_html(d["answer"], spans)}</div>')
    if report["unverified"]:
        parts.append("<h2>Unverified answers (first ones)</h2>")
        for u in report["unverified"]:
            why = "; ".join(html.escape(r["message"]) for r in u["reasons"])
            parts.append(f'<div class="answer unverified"><p class="q"><b>line {u["line"]}</b>: {why}</p>'
                         f'<p>{html.escape(u["answer"]) or "<i>(empty)</i>"}</p></div>')
    if report["error_rows"]:
        parts.append("<h2>Rows not scored</h2><table><tr><th>line</th><th>error</th></tr>"
                     + "".join(f"<tr><td class=num>{e['line']}</td><td>{html.escape(e['error'])}</td></tr>"
                               for e in report["error_rows"]) + "</table>")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>SpanUQ monitoring report</title>'
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")
