"""Evaluation plots (DVC plots): ROC curves, reliability diagram, u* vs û scatter, scored examples."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roc_plot(curves: dict[str, tuple[np.ndarray, np.ndarray]], threshold: float, path: Path) -> Path:
    """ROC of each method on binary labels u* ≥ threshold; curves: name → (u_true, score)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    from ..metrics.uq import is_positive

    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.4, 4), dpi=110)
    for name, (y, s) in curves.items():
        pos = is_positive(y, threshold)
        if pos.all() or not pos.any():
            continue
        fpr, tpr, _ = roc_curve(pos, s)
        ax.plot(fpr, tpr, label=f"{name} ({roc_auc_score(pos, s):.3f})")
    ax.plot([0, 1], [0, 1], ls=":", c="grey")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"span ROC (u* ≥ {threshold})")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def reliability_plot(u_true: np.ndarray, u_pred: dict[str, np.ndarray], n_bins: int, path: Path) -> Path:
    """Mean u* per bin of û (soft-label reliability), one line per variant (raw, calibrated)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.4, 4), dpi=110)
    edges = np.linspace(0, 1, n_bins + 1)
    for name, up in u_pred.items():
        idx = np.clip(np.digitize(up, edges[1:-1]), 0, n_bins - 1)
        xs, ys = [], []
        for b in range(n_bins):
            m = idx == b
            if m.any():
                xs.append(up[m].mean())
                ys.append(u_true[m].mean())
        ax.plot(xs, ys, marker="o", label=name)
    ax.plot([0, 1], [0, 1], ls=":", c="grey")
    ax.set_xlabel("predicted û")
    ax.set_ylabel("mean u* in bin")
    ax.set_title("reliability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def scatter_plot(u_true: np.ndarray, u_pred: np.ndarray, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.4, 4), dpi=110)
    ax.scatter(u_true, u_pred, s=8, alpha=0.5)
    ax.plot([0, 1], [0, 1], ls=":", c="grey")
    ax.set_xlabel("soft label u*")
    ax.set_ylabel("predicted û")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{len(u_true)} matched test spans")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
