"""Mixture-of-Beta uncertainty head (paper Eq. 6, App. A Stage 4).

For each query the head predicts J components (π_j, α_j, β_j) and models the
span's uncertainty u ∈ (0, 1) as

    p(u) = Σ_j π_j · Beta(u; α_j, β_j),
    log Beta(u; α, β) = (α-1) log u + (β-1) log(1-u) - log B(α, β),
    log B(α, β) = lgamma(α) + lgamma(β) - lgamma(α + β).

The point estimate is the mixture mean û = Σ_j π_j α_j / (α_j + β_j) and the
"effective precision" ν = Σ_j π_j (α_j + β_j) measures how concentrated the
prediction is (UCIR feeds it back into the decoder).  α, β = softplus(·) + α_min
with α_min = 0.5 < 1, so components may be U-shaped.  J = 1 is the single-Beta
ablation (π ≡ 1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """Plain ReLU MLP (detr's ``MLP``): ``num_layers`` linear layers, ReLU between them."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, num_layers: int):
        super().__init__()
        dims = [d_in] + [d_hidden] * (num_layers - 1) + [d_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


def mob_mean(pi: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """û = Σ_j π_j α_j / (α_j + β_j); params (..., J) -> (...)."""
    return (pi * alpha / (alpha + beta)).sum(-1)


def mob_precision(pi: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """ν = Σ_j π_j (α_j + β_j); params (..., J) -> (...)."""
    return (pi * (alpha + beta)).sum(-1)


def beta_log_prob(u: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """log Beta(u; α, β), broadcasting ``u`` against the parameters."""
    log_b = torch.lgamma(alpha) + torch.lgamma(beta) - torch.lgamma(alpha + beta)
    return (alpha - 1) * torch.log(u) + (beta - 1) * torch.log1p(-u) - log_b


def mob_log_prob(u: torch.Tensor, pi: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """log Σ_j π_j Beta(u; α_j, β_j) via log-sum-exp over components.

    ``u`` has shape (...) and must lie strictly inside (0, 1) (clamp labels first);
    ``pi``, ``alpha``, ``beta`` have shape (..., J).  Returns (...).
    """
    log_pi = torch.log(pi.clamp(min=torch.finfo(pi.dtype).tiny))
    return torch.logsumexp(log_pi + beta_log_prob(u.unsqueeze(-1), alpha, beta), dim=-1)


class MixtureOfBeta(nn.Module):
    """2-layer MLP -> 3J values -> (π softmax, α = softplus + α_min, β = softplus + α_min).

    forward(x (..., d)) returns a dict with ``pi``, ``alpha``, ``beta`` (..., J),
    ``u`` (mixture mean) and ``nu`` (effective precision), both (...).
    """

    def __init__(self, d_in: int, n_components: int = 3, alpha_min: float = 0.5, d_hidden: int | None = None):
        super().__init__()
        self.n_components = n_components
        self.alpha_min = alpha_min
        self.mlp = MLP(d_in, d_hidden or d_in, 3 * n_components, num_layers=2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits, a, b = self.mlp(x).chunk(3, dim=-1)
        pi = logits.softmax(-1)  # J == 1: π ≡ 1
        alpha = F.softplus(a) + self.alpha_min
        beta = F.softplus(b) + self.alpha_min
        return {"pi": pi, "alpha": alpha, "beta": beta,
                "u": mob_mean(pi, alpha, beta), "nu": mob_precision(pi, alpha, beta)}
