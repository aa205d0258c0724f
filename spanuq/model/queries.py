"""Reference spans for the set decoder: the DETR-family remedies for learning from few answers.

Used by ``SpanUQProbe`` when any of ``query_selection="two_stage"``, ``refine`` or
``dn_groups > 0`` is on (docs/detector.md).  Every decoder query then carries a
reference span r = [s, e] besides its content vector:

* position: the query's positional embedding is an MLP of a sinusoidal code of
  r's centre and width (DAB-DETR), added to the queries and keys of self-attention
  and to the query of cross-attention (``RefDecoderLayer``, pre-norm, as detr);
* boundaries: the regression head predicts an offset to r in inverse-sigmoid space
  (``span_ops.span_to_logits``), so an untrained head returns r itself;
* refinement (``refine``): layer ℓ+1 starts from layer ℓ's detached span;
* two-stage selection (``ProposalHead``, ``select_proposals``): every encoder token t
  proposes the span [(t - l_t)/T, (t + 1 + r_t)/T] (l, r ≥ 0 tokens) with an
  objectness logit, trained densely (FCOS-style: a token inside a labelled span is
  positive and regresses that span); the top-N proposals after 1-D NMS seed the N
  references while the content vectors stay learned (DINO's mixed query selection);
* denoising (``build_denoising``, DN-DETR/DINO): during training G groups of
  jittered ground-truth spans are appended as extra queries with a known target (no
  Hungarian matching); ``denoising_attn_mask`` keeps the matching queries from
  seeing them and the groups from seeing each other.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .mob import MLP
from .span_ops import pairwise_span_iou, span_se_to_cw


def span_position_embedding(spans: torch.Tensor, d: int, temperature: float = 10000.0) -> torch.Tensor:
    """(..., 2) spans [s, e] in [0, 1] -> (..., d): sin/cos codes of 2π·centre and 2π·width, d/2 each."""
    half = d // 2
    idx = torch.arange(half, device=spans.device, dtype=torch.float32)
    dim_t = temperature ** (2 * torch.div(idx, 2, rounding_mode="floor") / half)
    cw = span_se_to_cw(spans.float()) * (2 * math.pi)
    x = cw[..., None] / dim_t  # (..., 2, half)
    x = torch.stack([x[..., 0::2].sin(), x[..., 1::2].cos()], dim=-1).flatten(-2)  # interleave
    return x.flatten(-2).to(spans.dtype)


class RefDecoderLayer(nn.Module):
    """Pre-norm decoder layer with a positional embedding on queries (detr's ``forward_pre``)."""

    def __init__(self, d: int, n_heads: int, d_ffn: int, dropout: float):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, n_heads, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, n_heads, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, d_ffn), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ffn, d))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pos, z, attn_mask=None, query_padding=None, memory_padding=None):
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h + pos, h + pos, h, attn_mask=attn_mask,
                                         key_padding_mask=query_padding, need_weights=False)[0])
        h = self.norm2(x)
        x = x + self.drop(self.cross_attn(h + pos, z, z, key_padding_mask=memory_padding, need_weights=False)[0])
        return x + self.drop(self.ffn(self.norm3(x)))


class ProposalHead(nn.Module):
    """Two-stage: each encoder token proposes a span around itself plus an objectness logit."""

    def __init__(self, d: int):
        super().__init__()
        self.mlp = MLP(d, d, 3, num_layers=2)

    def forward(self, z: torch.Tensor, lengths: torch.Tensor) -> dict:
        """z (B,T,d) -> {"spans": (B,T,2) normalised, "logits": (B,T)}."""
        x = self.mlp(z)
        left, right = F.softplus(x[..., 1]), F.softplus(x[..., 2])  # extents in tokens
        t = torch.arange(z.shape[1], device=z.device, dtype=z.dtype)[None, :]
        T = lengths.to(z.dtype)[:, None]
        s = ((t - left) / T).clamp(0, 1)
        e = torch.maximum(((t + 1 + right) / T).clamp(0, 1), s)
        return {"spans": torch.stack([s, e], dim=-1), "logits": x[..., 0]}


@torch.no_grad()
def select_proposals(spans: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor, n: int,
                     iou_threshold: float = 0.5) -> torch.Tensor:
    """Top-n proposals per example after greedy 1-D NMS, (B, n, 2), detached.

    When NMS keeps fewer than n, the best suppressed proposals fill the rest; an
    answer shorter than n tokens repeats its proposals.
    """
    out = []
    for i in range(spans.shape[0]):
        real = mask[i].nonzero().flatten()
        sc, sp = logits[i, real], spans[i, real]
        cand = torch.argsort(sc, descending=True, stable=True)[: 4 * n]  # NMS over the best 4n only
        sc, sp = sc[cand], sp[cand]
        iou = pairwise_span_iou(sp.float(), sp.float()).tolist()
        kept: list[int] = []
        for j in range(len(cand)):  # candidates are already sorted best first
            if all(iou[j][k] <= iou_threshold for k in kept):
                kept.append(j)
        order = (kept + [j for j in range(len(cand)) if j not in set(kept)])[:n]
        order = (order * math.ceil(n / len(order)))[:n]
        out.append(sp[order])
    return torch.stack(out).detach()


def dense_proposal_targets(targets: list[dict], lengths: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: (positive (B,T) bool, target span (B,T,2)).

    Token t (centre (t+0.5)/T_b) is positive when it lies inside a labelled span;
    inside several, it regresses the shortest.
    """
    B = len(targets)
    pos = torch.zeros(B, T, dtype=torch.bool)
    tgt = torch.zeros(B, T, 2)
    for b, t in enumerate(targets):
        spans = t["spans"].detach().cpu().float()
        if not len(spans):
            continue
        n = int(lengths[b])
        c = (torch.arange(n, dtype=torch.float32) + 0.5) / n
        inside = (c[:, None] >= spans[None, :, 0]) & (c[:, None] <= spans[None, :, 1])  # (n, K)
        width = (spans[:, 1] - spans[:, 0])[None, :].expand(n, -1).masked_fill(~inside, math.inf)
        k = width.argmin(-1)
        pos[b, :n] = inside.any(-1)
        tgt[b, :n] = spans[k]
    return pos, tgt


def build_denoising(targets: list[dict], groups: int, noise: float, negatives: bool,
                    generator: torch.Generator | None = None) -> dict | None:
    """Jittered ground-truth spans as extra queries (DN-DETR; negatives as DINO's CDN).

    Each boundary moves by δ·w/2 (w the span width), |δ| < λ for a positive copy and
    λ ≤ |δ| < 2λ for a negative one.  Per group the K_max slots of the batch hold
    [positives | negatives]; slots past an example's K are padding.

    Returns None when the batch has no spans, else ``spans`` (B, Q, 2), ``target``
    (B, Q) index of the source span (-1 on padding), ``positive`` (B, Q) bool,
    ``padding`` (B, Q) bool, ``group_size`` and ``groups``.
    """
    K = max(len(t["spans"]) for t in targets)
    if K == 0 or groups <= 0:
        return None
    B, copies = len(targets), 2 if negatives else 1
    size = K * copies
    device = targets[0]["spans"].device
    spans = torch.zeros(B, groups, copies, K, 2)
    target = torch.full((B, groups, copies, K), -1, dtype=torch.long)
    positive = torch.zeros(B, groups, copies, K, dtype=torch.bool)
    for b, t in enumerate(targets):
        gt = t["spans"].detach().cpu().float()
        k = len(gt)
        if k == 0:
            continue
        w = (gt[:, 1] - gt[:, 0]).clamp(min=1e-3)
        for c in range(copies):
            mag = torch.rand(groups, k, 2, generator=generator) * noise + c * noise  # [cλ, (c+1)λ)
            sign = torch.randint(0, 2, (groups, k, 2), generator=generator) * 2 - 1
            jit = gt[None] + sign * mag * (w / 2)[None, :, None]
            jit = jit.clamp(0, 1).sort(-1).values
            jit[..., 1] = torch.maximum(jit[..., 1], (jit[..., 0] + 1e-3).clamp(max=1))
            jit[..., 0] = torch.minimum(jit[..., 0], jit[..., 1] - 1e-3).clamp(min=0)
            spans[b, :, c, :k] = jit
            target[b, :, c, :k] = torch.arange(k)
            positive[b, :, c, :k] = c == 0
    padding = target < 0
    spans[padding] = torch.tensor([0.0, 1.0])  # a harmless valid span for padded slots
    return {"spans": spans.view(B, groups * size, 2).to(device), "target": target.view(B, -1).to(device),
            "positive": positive.view(B, -1).to(device), "padding": padding.view(B, -1).to(device),
            "group_size": size, "groups": groups}


def denoising_attn_mask(n_match: int, groups: int, group_size: int, device=None) -> torch.Tensor:
    """(Q, Q) bool self-attention mask, True = blocked, for [N matching | G groups of denoising].

    Matching queries never see denoising queries (they would read the answers);
    a denoising group sees itself and the matching queries, not the other groups.
    """
    Q = n_match + groups * group_size
    blocked = torch.zeros(Q, Q, dtype=torch.bool, device=device)
    blocked[:n_match, n_match:] = True
    for g in range(groups):
        lo, hi = n_match + g * group_size, n_match + (g + 1) * group_size
        blocked[lo:hi, n_match:lo] = True
        blocked[lo:hi, hi:] = True
    return blocked
