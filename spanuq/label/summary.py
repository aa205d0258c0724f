"""The label report: how the soft labels came out (DVC metrics + a plot).

u* bins follow the paper's strata (App. D): low u* < 0.1 ≤ mid < 0.4 ≤ high.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..pipeline.records import LabeledResponse

HIST_BINS = 10


def u_bin(u: float | None, edges: list[float]) -> str:
    """'low' | 'mid' | 'high' for u* (or u*_seq) by the two edges; 'none' for None."""
    if u is None:
        return "none"
    lo, hi = edges
    return "low" if u < lo else ("mid" if u < hi else "high")


def label_report(records: list[LabeledResponse], edges: list[float], extra: dict | None = None,
                 positive_threshold: float = 0.5) -> dict:
    """Counts and distributions of the labels (all values JSON-safe).

    ``u.below_threshold``: the share of spans with u* under the positive threshold — the
    negatives (claims the model would say again) that every AUROC needs."""
    from ..metrics.uq import is_positive

    u = np.array([s.u for r in records for s in r.spans], dtype=float)
    per_answer = np.array([len(r.spans) for r in records if r.status == "ok"], dtype=float)
    hist, bin_edges = np.histogram(u, bins=HIST_BINS, range=(0.0, 1.0))
    bins = Counter(u_bin(float(x), edges) for x in u)
    n = max(len(u), 1)
    by_domain: dict[str, dict] = {}
    for d in sorted({r.domain for r in records}):
        ud = [s.u for r in records if r.domain == d for s in r.spans]
        by_domain[d] = {"responses": sum(r.domain == d for r in records), "spans": len(ud),
                        "mean_u": round(float(np.mean(ud)), 4) if ud else None}
    splits = {}
    for sp in ("train", "dev", "test"):
        rs = [r for r in records if r.split == sp]
        splits[sp] = {"responses": len(rs), "labelled": sum(r.status == "ok" for r in rs),
                      "spans": sum(len(r.spans) for r in rs)}
    return {
        "responses": len(records),
        "status": dict(Counter(r.status for r in records)),
        "spans": int(len(u)),
        "spans_per_answer": {"mean": _r(per_answer.mean()) if len(per_answer) else None,
                             "median": _r(np.median(per_answer)) if len(per_answer) else None,
                             "max": int(per_answer.max()) if len(per_answer) else 0},
        "u": {"mean": _r(u.mean()) if len(u) else None, "std": _r(u.std()) if len(u) else None,
              "below_threshold": _r((~is_positive(u, positive_threshold)).mean()) if len(u) else None,
              "at_threshold": int(np.isclose(u, positive_threshold).sum()),
              "low": _r(bins["low"] / n), "mid": _r(bins["mid"] / n), "high": _r(bins["high"] / n),
              "histogram": {"edges": [_r(e) for e in bin_edges], "counts": [int(c) for c in hist]}},
        "u_seq_mean": _r(np.mean([r.u_seq for r in records if r.u_seq is not None]))
        if any(r.u_seq is not None for r in records) else None,
        "by_domain": by_domain,
        "splits": splits,
        **(extra or {}),
    }


def _r(x) -> float:
    return round(float(x), 4)


def plot_label_report(records: list[LabeledResponse], out_dir: str | Path, title: str = "") -> list[Path]:
    """u* histogram and spans-per-answer histogram as PNGs (DVC plots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    u = [s.u for r in records for s in r.spans]
    k = [len(r.spans) for r in records if r.status == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), dpi=110)
    axes[0].hist(u, bins=HIST_BINS, range=(0, 1), color="#c0504d", edgecolor="white")
    axes[0].set_xlabel("soft label u*")
    axes[0].set_ylabel("spans")
    axes[0].set_title(f"u* of {len(u)} spans")
    axes[1].hist(k, bins=range(0, max(k, default=1) + 2), color="#4f81bd", edgecolor="white")
    axes[1].set_xlabel("spans per answer")
    axes[1].set_title(f"{len(k)} labelled answers")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = out / "labels.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]
