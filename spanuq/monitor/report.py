"""The numbers of a monitoring report over many scored answers (``report.json``).

An answer is one of:

* **uncertain** — scored, with at least one span whose û is above the threshold;
* **clean** — scored, no span above the threshold;
* **unverified** — SpanUQ could not judge it (`spanuq.score.status`): counted apart, never as clean;
* **error** — the row could not be scored at all (bad input, a failing backbone).

Shares of uncertain answers are over the scored ones, with a 95% Wilson interval; histograms of
span û, answer û_seq and the highest û per answer; the same shares per value of every grouping
column (``domain``, metadata keys); the most doubtful answers with their spans.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

BINS = 20
MAX_GROUP_VALUES = 50


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson score interval of a proportion k / n (None when n = 0)."""
    if n == 0:
        return None
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def histogram(values: list[float]) -> dict:
    counts, edges = np.histogram(np.asarray(values, dtype=float), bins=BINS, range=(0.0, 1.0))
    return {"edges": [round(float(e), 4) for e in edges], "counts": [int(c) for c in counts], "n": len(values)}


def kind(result, threshold: float | None) -> str:
    """unverified / uncertain / clean; ``threshold`` None: a span counts at the answer's own flag threshold
    (the one its view marks "likely wrong" from)."""
    if result.status != "scored":
        return "unverified"
    if threshold is None:
        return "uncertain" if any(s.u >= result.flag_threshold for s in result.spans) else "clean"
    return "uncertain" if any(s.u > threshold for s in result.spans) else "clean"


def threshold_text(threshold: float | None, digits: int = 3) -> str:
    """How a report names its threshold."""
    return "the flag threshold of each answer's source" if threshold is None else f"û > {threshold:.{digits}g}"


def _rates(items: list) -> dict:
    kinds = Counter(k for _, _, k in items)
    n_scored = kinds["uncertain"] + kinds["clean"]
    useq = [r.u_seq for _, r, k in items if k != "unverified" and r.u_seq is not None]
    ci = wilson(kinds["uncertain"], n_scored)
    return {"n": len(items), "scored": n_scored, "uncertain": kinds["uncertain"], "clean": kinds["clean"],
            "unverified": kinds["unverified"],
            "share_uncertain": kinds["uncertain"] / n_scored if n_scored else None,
            "share_uncertain_ci95": list(ci) if ci else None,
            "share_unverified": kinds["unverified"] / len(items) if items else None,
            "mean_u_seq": float(np.mean(useq)) if useq else None}


def group_columns(rows: list, by: list[str] | None) -> list[str]:
    """``by``, or every column with 2 to 50 distinct values."""
    if by:
        return by
    values: dict[str, set] = defaultdict(set)
    for r in rows:
        for k, v in r.columns.items():
            values[k].add(v)
    return sorted(k for k, v in values.items() if 2 <= len(v) <= MAX_GROUP_VALUES)


def build(rows_results: list, errors: list, threshold: float | None, by: list[str] | None = None, top: int = 20,
          threshold_source: str = "", meta: dict | None = None) -> dict:
    """``rows_results``: (Row, ScoreResult) of every row scored; ``errors``: (line, message) of the others."""
    items = [(row, res, kind(res, threshold)) for row, res in rows_results]
    scored = [(row, res) for row, res, k in items if k != "unverified"]
    spans_u = [s.u for _, r in scored for s in r.spans]
    reasons = Counter(reason.code for _, r, k in items if k == "unverified" for reason in r.status_reasons)
    groups = {}
    for col in group_columns([row for row, _, _ in items], by):
        by_value: dict[str, list] = defaultdict(list)
        for it in items:
            by_value[it[0].columns.get(col, "(missing)")].append(it)
        groups[col] = sorted(({"value": v, **_rates(its)} for v, its in by_value.items()),
                             key=lambda g: (-(g["share_uncertain"] or 0), g["value"]))
    doubtful = sorted(((row, r, max(s.u for s in r.spans)) for row, r in scored if r.spans),
                      key=lambda x: -x[2])[:top]
    unverified = [(row, r) for row, r, k in items if k == "unverified"]
    return {
        "meta": {**(meta or {}), "threshold": threshold, "threshold_source": threshold_source,
                 "rows": len(items) + len(errors), "errors": len(errors)},
        "overall": _rates(items),
        "status": {"scored": len(items) - len(unverified), "unverified": len(unverified), "reasons": dict(reasons)},
        "histograms": {"span_u": histogram(spans_u), "u_seq": histogram([r.u_seq for _, r in scored]),
                       "max_u": histogram([max((s.u for s in r.spans), default=0.0) for _, r in scored])},
        "groups": groups,
        "doubtful": [{"line": row.line, "id": row.id, "columns": row.columns, "prompt": r.prompt, "answer": r.answer,
                      "max_u": mu, "u_seq": r.u_seq,
                      "spans": [{"start": s.start, "end": s.end, "text": s.text, "u": s.u} for s in r.spans]}
                     for row, r, mu in doubtful],
        "unverified": [{"line": row.line, "id": row.id, "answer": r.answer[:300],
                        "reasons": [x.model_dump() for x in r.status_reasons]} for row, r in unverified[:top]],
        "error_rows": [{"line": n, "error": e} for n, e in errors[:100]],
    }
