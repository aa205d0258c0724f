"""The plain-text table of methods (SpanUQ, the floors, the baselines) that the stages print."""
from __future__ import annotations

from ..metrics.uq import WIDE_CI, metric_value, negatives, wide_interval

# the ablation table (`spanuq ablate`, the report): column name, where its metric is in a metrics dict
ABLATION_COLUMNS = [("AUROC", ("span", "auroc")), ("MAE", ("span", "mae")), ("ρ_s", ("span", "spearman")),
                    ("P", ("detection", "precision")), ("R", ("detection", "recall")), ("F1", ("detection", "f1")),
                    ("coverage", ("coverage",)), ("mean IoU", ("detection", "mean_iou"))]

# headline span metrics are over every labelled span; "matched" columns only over the
# labelled spans a method detected (IoU ≥ 0.3), beside how many that was (coverage).
# Every AUROC has the negatives it rests on beside it ("neg": negatives / items).
_COLUMNS = [("AUROC", "span", "auroc"), ("neg", "span", "#neg"), ("pair acc", "span", "pair_accuracy"),
            ("MAE", "span", "mae"), ("ρ_s", "span", "spearman"), ("ECE", "span", "ece"), ("F1", "detection", "f1"),
            ("coverage", None, "coverage"), ("AUROC matched", "span_matched", "auroc"),
            ("neg matched", "span_matched", "#neg"),
            ("seq ρ", "sequence", "spearman"), ("seq AUROC@0.3", "sequence", "auroc@"), ("seq neg", "sequence", "#neg")]
WIDE_MARK = "!"
WIDE_NOTE = (f"{WIDE_MARK} the 95% interval is wider than ±{WIDE_CI:g}: too few items (see neg) to tell apart "
             "methods that close")


def _cell(m) -> str:
    """``0.812 [0.77, 0.85]``, ``0.812`` without a CI, ``n/a`` when undefined or missing; a
    trailing ``!`` when the interval is wider than ±0.1."""
    if isinstance(m, str):
        return m
    v = metric_value(m)
    if v is None:
        return "n/a"
    ci = m.get("ci") if isinstance(m, dict) else None
    text = f"{v:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{v:.3f}"
    return text + (f" {WIDE_MARK}" if wide_interval(m) else "")


def _lookup(row: dict, section: str | None, key: str):
    if section is None:
        return row.get(key)
    if "span" not in row and section == "span":
        row = {"span": row}  # a bare span_metrics dict
    sec = row.get(section) or {}
    if key == "#neg":
        return negatives(sec) if sec else None
    if key.endswith("@"):
        key = next((k for k in sec if k.startswith(key)), key)
    return sec.get(key)


def format_table(rows: dict[str, dict]) -> str:
    """Plain-text table: one row per method (an ``evaluate_predictions``-shaped dict, or a
    bare ``span_metrics`` dict), columns as in ``_COLUMNS``; ``n/a`` where a method has no such number."""
    header = ["method"] + [_seq_auroc_header(rows) if key == "auroc@" else name for name, _, key in _COLUMNS]
    body = [[str(method)] + [_cell(_lookup(row, sec, key)) for _, sec, key in _COLUMNS]
            for method, row in rows.items()]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    notes = [WIDE_NOTE] if any(c.endswith(f" {WIDE_MARK}") for r in body for c in r) else []
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in body] + notes)


def _seq_auroc_header(rows: dict[str, dict]) -> str:
    for row in rows.values():
        for k in (row.get("sequence") or {}):
            if k.startswith("auroc@"):
                return "seq AUROC" + k[len("auroc"):]
    return "seq AUROC@0.3"
