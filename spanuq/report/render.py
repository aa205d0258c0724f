"""`Table`s and figures → Markdown and one standalone HTML page (inline CSS, images as data URIs, no script)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

from .tables import Table

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1d2125;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:right;white-space:nowrap}
th{background:#f3f5f7}td:first-child,th:first-child{text-align:left}
tr.ours td{font-weight:600;background:#eef6ff}
p.note{font-size:.8rem;color:#57606a;margin:.2rem 0;max-width:1000px}
figure{display:inline-block;margin:.5rem 1rem .5rem 0}figcaption{font-size:.8rem;color:#57606a}
"""


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def table_markdown(t: Table) -> str:
    lines = [f"## {t.title}", "", "| " + " | ".join(map(_md_escape, t.headers)) + " |",
             "|" + "|".join("---" for _ in t.headers) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in t.rows]
    lines += [""] + [f"{n}  " for n in t.notes]
    return "\n".join(lines) + "\n"


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = []
    for row in t.rows:
        cls = ' class="ours"' if row and row[0].startswith("SpanUQ") else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in t.notes)
    return (f"<section><h2>{html.escape(t.title)}</h2><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{notes}</section>")


def write_report(out_dir: Path, title: str, intro: list[str], tables: list[Table],
                 figures: list[tuple[str, Path]]) -> tuple[Path, Path]:
    """``report.md`` (figures as relative links) and ``index.html`` (figures embedded)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", ""] + [f"{p}  " for p in intro] + [""]
    md += [table_markdown(t) for t in tables]
    md += [f"![{cap}]({Path(p).name})" for cap, p in figures]
    (out_dir / "report.md").write_text("\n".join(md) + "\n")
    figs = []
    for cap, p in figures:
        data = base64.b64encode(Path(p).read_bytes()).decode()
        figs.append(f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(cap)}</figcaption></figure>")
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<link rel="icon" href="data:,"><meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            + "".join(f"<p>{html.escape(p)}</p>" for p in intro)
            + "".join(table_html(t) for t in tables)
            + f"<section><h2>Figures</h2>{''.join(figs)}</section></body></html>\n")
    (out_dir / "index.html").write_text(page)
    return out_dir / "report.md", out_dir / "index.html"
