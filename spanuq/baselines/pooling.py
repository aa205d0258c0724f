"""Span pooling: the mean of per-token values over each span's tokens.

For spans (b_k, e_k) with inclusive token indices,

    pooled_k = 1 / (e_k − b_k + 1) · Σ_{t = b_k..e_k} x_t,

computed as one matmul M·x with M_kt = 1[b_k ≤ t ≤ e_k] / (e_k − b_k + 1), so
overlapping and one-token spans need no special case.
"""
from __future__ import annotations

import torch


def span_mean(x: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """x (T,) or (T, d), spans (K, 2) long inclusive → (K,) or (K, d) float32 means."""
    x = x.float()
    spans = torch.as_tensor(spans, dtype=torch.long).reshape(-1, 2).to(x.device)
    T = x.shape[0]
    b, e = spans[:, 0], spans[:, 1]
    if len(spans) and ((b < 0).any() or (e >= T).any() or (b > e).any()):
        bad = spans[(b < 0) | (e >= T) | (b > e)][0].tolist()
        raise ValueError(f"span {bad} is not a valid inclusive token range for a length-{T} response")
    t = torch.arange(T, device=x.device)
    m = ((t >= b[:, None]) & (t <= e[:, None])).float()  # (K, T)
    m = m / (e - b + 1).clamp(min=1).float()[:, None]
    return m @ x
