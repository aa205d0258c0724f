"""MLP probe baseline (paper §4.2, App. B.6): a 3-layer MLP on mean-pooled span features.

Oracle setting: the ground-truth span boundaries (b, e) are given.  Features are
the fused hidden states averaged over the span's tokens,

    x = 1 / (e − b + 1) · Σ_{t = b..e} h_t ∈ R^d,

standardised with the train mean/std, and

    û = σ(W₃ ReLU(W₂ ReLU(W₁ x̃ + b₁) + b₂) + b₃),   d → h₁ → h₂ → 1,

with (h₁, h₂) = (min(512, 2d), min(256, d)): 5120 → 512 → 256 → 1 for Qwen3-14B
as in the paper, 576 → 512 → 256 → 1 for SmolLM2-135M.  It is trained on the
soft labels u* with binary cross-entropy against soft targets,

    L = −1/N Σ [u* log û + (1 − u*) log(1 − û)],

minimised (= KL to u*) at û = u*, by AdamW (lr 1e-3, mini-batches of 128) with
early stopping on the dev loss (patience 5): ~1 s for 2,000 spans × 576 dims on
two CPU cores.
Training is seeded and runs inside a forked RNG, so two fits with one seed give
identical weights on CPU and the caller's RNG state is left untouched.

`pool_span_features`, `train_span_mlp` and `predict_span_mlp` are the functional
core (the layer probe uses them on raw arrays); `MLPProbe` wraps them as a
`SpanScorer`.
"""
from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..features.dataset import ResponseExample
from .base import Granularity, SpanScorer
from .pooling import span_mean


def pool_span_features(h: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """h (T, d), spans (K, 2) inclusive token indices → (K, d) float32 mean over tokens b..e."""
    return span_mean(h, spans)


def default_hidden(d: int) -> tuple[int, int]:
    return min(512, 2 * d), min(256, d)


class SpanMLP(nn.Module):
    """Standardise → Linear/ReLU/Dropout ×2 → Linear → logit. `forward` returns logits."""

    def __init__(self, d: int, hidden: tuple[int, int] | None = None, dropout: float = 0.1):
        super().__init__()
        h1, h2 = hidden or default_hidden(d)
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("std", torch.ones(d))
        self.net = nn.Sequential(
            nn.Linear(d, h1), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(h1, h2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(h2, 1),
        )
        self.info: dict[str, Any] = {}

    def set_standardization(self, X: torch.Tensor) -> None:
        X64 = X.double()
        self.mean.copy_(X64.mean(0).float())
        self.std.copy_(X64.std(0, unbiased=False).clamp(min=1e-6).float() if len(X) > 1 else torch.ones_like(self.std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std).squeeze(-1)


def _as_tensor(x, device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=torch.float32).to(device)


def _rng_devices(device: str) -> list[int]:
    d = torch.device(device)
    return [d.index or 0] if d.type == "cuda" else []


def train_span_mlp(X_train, y_train, X_dev=None, y_dev=None, seed: int = 0, *,
                   hidden: tuple[int, int] | None = None, dropout: float = 0.1, lr: float = 1e-3,
                   weight_decay: float = 1e-2, batch_size: int = 128, max_epochs: int = 100, patience: int = 5,
                   dev_fraction: float = 0.15, device: str = "cpu", groups=None) -> SpanMLP:
    """Fit a `SpanMLP` on (N, d) span features and (N,) soft labels in [0, 1].

    Early stopping on the dev BCE (best epoch kept, stop after ``patience`` epochs
    without improvement).  Without dev data a seeded ``dev_fraction`` of the train
    spans is held out — of whole answers when ``groups`` (the answer of each span)
    is given, since spans of one answer are correlated; with a single train span
    (or answer) there is nothing to hold out and the train loss is monitored.  ``model.info`` records epochs, best epoch and
    best dev loss.
    """
    X, y = _as_tensor(X_train, device), _as_tensor(y_train, device).reshape(-1)
    if X.ndim != 2 or len(X) != len(y) or not len(X):
        raise ValueError(f"need (N, d) features and (N,) labels with N > 0; got {tuple(X.shape)}, {tuple(y.shape)}")
    if ((y < 0) | (y > 1)).any():
        raise ValueError("soft labels must lie in [0, 1]")
    g = torch.Generator().manual_seed(seed)
    held_out: list[str] = []
    if (X_dev is None or len(X_dev) == 0) and groups is not None:
        names = np.unique(np.asarray(groups, dtype=str))
        perm = torch.randperm(len(names), generator=g).numpy()
        n_dev = min(max(int(round(dev_fraction * len(names))), 1), len(names) - 1) if len(names) > 1 else 0
        held_out = sorted(names[perm[:n_dev]].tolist())
        held = np.isin(np.asarray(groups, dtype=str), held_out)
        held_t = torch.as_tensor(held, device=device)
        Xd, yd = (X[held_t], y[held_t]) if n_dev else (X, y)
        X, y = (X[~held_t], y[~held_t]) if n_dev else (X, y)
    elif X_dev is None or len(X_dev) == 0:
        perm = torch.randperm(len(X), generator=g).to(device)
        n_dev = int(round(dev_fraction * len(X))) if len(X) > 1 else 0
        n_dev = min(max(n_dev, 1 if len(X) > 1 else 0), len(X) - 1)
        Xd, yd = (X[perm[:n_dev]], y[perm[:n_dev]]) if n_dev else (X, y)
        X, y = X[perm[n_dev:]], y[perm[n_dev:]]
    else:
        Xd, yd = _as_tensor(X_dev, device), _as_tensor(y_dev, device).reshape(-1)

    with torch.random.fork_rng(devices=_rng_devices(device)):
        torch.manual_seed(seed)
        model = SpanMLP(X.shape[1], hidden, dropout).to(device)
        model.set_standardization(X)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        best, best_loss, best_epoch, bad, epoch = None, float("inf"), -1, 0, -1
        for epoch in range(max_epochs):
            model.train()
            order = torch.randperm(len(X), generator=g).to(device)
            for s in range(0, len(X), batch_size):
                idx = order[s: s + batch_size]
                loss = F.binary_cross_entropy_with_logits(model(X[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                dev_loss = float(F.binary_cross_entropy_with_logits(model(Xd), yd))
            if dev_loss < best_loss - 1e-6:
                best, best_loss, best_epoch, bad = copy.deepcopy(model.state_dict()), dev_loss, epoch, 0
            else:
                bad += 1
                if bad >= patience:
                    break
    model.load_state_dict(best)
    model.eval()
    model.info = {"epochs": epoch + 1, "best_epoch": best_epoch, "dev_loss": best_loss,
                  "n_train": len(X), "n_dev": len(Xd), "held_out_groups": held_out}
    return model


@torch.no_grad()
def predict_span_mlp(model: SpanMLP, X, batch_size: int = 8192) -> np.ndarray:
    """(N, d) features → (N,) float64 û in [0, 1]."""
    model.eval()
    device = model.mean.device
    X = _as_tensor(X, device)
    if not len(X):
        return np.zeros(0, dtype=np.float64)
    out = [torch.sigmoid(model(X[s: s + batch_size])) for s in range(0, len(X), batch_size)]
    return torch.cat(out).double().cpu().numpy()


def span_features(examples: list[ResponseExample]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Stacked pooled features (ΣK, d), soft labels (ΣK,) and per-example span counts."""
    counts = [len(e.spans) for e in examples]
    d = next((e.h.shape[1] for e in examples), 0)
    X = [pool_span_features(e.h, e.spans) for e in examples if len(e.spans)]
    y = [e.u.float().reshape(-1) for e in examples if len(e.spans)]
    return (torch.cat(X) if X else torch.zeros(0, d), torch.cat(y) if y else torch.zeros(0), counts)


class MLPProbe(SpanScorer):
    """Oracle-span MLP probe. Scores are sigmoid outputs in [0, 1]."""

    name: ClassVar[str] = "mlp_probe"
    granularity: ClassVar[Granularity] = "span"
    oracle_spans: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ("hidden_states",)

    def __init__(self, hidden: tuple[int, int] | None = None, dropout: float = 0.1, lr: float = 1e-3,
                 weight_decay: float = 1e-2, batch_size: int = 128, max_epochs: int = 100, patience: int = 5,
                 dev_fraction: float = 0.15, seed: int = 0, device: str = "cpu"):
        self.hparams = dict(hidden=hidden, dropout=dropout, lr=lr, weight_decay=weight_decay, batch_size=batch_size,
                            max_epochs=max_epochs, patience=patience, dev_fraction=dev_fraction)
        self.seed, self.device = seed, device
        self.model: SpanMLP | None = None

    @classmethod
    def from_config(cls, cfg, **overrides: Any) -> "MLPProbe":
        return cls(**{"seed": cfg.train.seed, "device": cfg.train.device, **overrides})

    def fit(self, train: list[ResponseExample], dev: list[ResponseExample]) -> None:
        from ..llm.loading import resolve_device

        device = resolve_device(self.device)
        train = [e for e in train if len(e.spans)]
        dev = [e for e in dev if len(e.spans)]
        if not train:
            raise ValueError("MLPProbe.fit: no spans in the train split")
        if not dev and len(train) > 1:  # hold out whole responses: their spans are correlated
            perm = np.random.default_rng(self.seed).permutation(len(train))
            n_dev = min(max(1, round(self.hparams["dev_fraction"] * len(train))), len(train) - 1)
            dev, train = [train[i] for i in perm[:n_dev]], [train[i] for i in perm[n_dev:]]
        Xtr, ytr, _ = span_features(train)
        Xdv, ydv, _ = span_features(dev)
        self.model = train_span_mlp(Xtr, ytr, Xdv, ydv, seed=self.seed, device=device, **self.hparams)

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        if self.model is None:
            raise RuntimeError("MLPProbe: call fit(train, dev) first")
        X, _, counts = span_features(examples)
        return list(np.split(predict_span_mlp(self.model, X), np.cumsum(counts)[:-1])) if examples else []
