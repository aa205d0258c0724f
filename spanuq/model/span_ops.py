"""1-D span geometry, the interval analogue of detr's ``util/box_ops.py``.

A span is a (..., 2) tensor ``[start, end]`` on a continuous axis (normalised
positions in [0, 1] in SpanUQ: token ``t`` of a T-token answer covers
``[t/T, (t+1)/T]``).  Everything here broadcasts over leading dimensions.

For spans a = [s_a, e_a], b = [s_b, e_b]:

    inter(a, b) = max(0, min(e_a, e_b) - max(s_a, s_b))
    union(a, b) = |a| + |b| - inter(a, b)
    hull(a, b)  = max(e_a, e_b) - min(s_a, s_b)          (smallest enclosing span)
    IoU         = inter / union                           in [0, 1]
    GIoU        = IoU - (hull - union) / hull             in (-1, 1]

GIoU (Rezatofighi et al., 2019) equals IoU when the two spans overlap or touch
(then hull == union) and becomes negative in proportion to the gap between
disjoint spans, so it still has a gradient when the prediction misses.
"""
from __future__ import annotations

import torch

_EPS = 1e-7


def span_cw_to_se(x: torch.Tensor) -> torch.Tensor:
    """[centre, width] -> [start, end]."""
    c, w = x.unbind(-1)
    return torch.stack([c - 0.5 * w, c + 0.5 * w], dim=-1)


def span_se_to_cw(x: torch.Tensor) -> torch.Tensor:
    """[start, end] -> [centre, width]."""
    s, e = x.unbind(-1)
    return torch.stack([0.5 * (s + e), e - s], dim=-1)


def span_length(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1] - x[..., 0]).clamp(min=0)


def _inter_union(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inter = (torch.minimum(a[..., 1], b[..., 1]) - torch.maximum(a[..., 0], b[..., 0])).clamp(min=0)
    union = span_length(a) + span_length(b) - inter
    return inter, union


def char_iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    """IoU of two character ranges ``[start, end)`` of one text, as plain numbers (0 when either is empty
    or they are disjoint): how much a shown span covers a labelled slot or another span."""
    inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if inter > 0 else 0.0


def span_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise IoU of spans ``a`` and ``b`` (broadcast), shape ``broadcast(a, b)[..., 0]``."""
    inter, union = _inter_union(a, b)
    return inter / union.clamp(min=_EPS)


def span_giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise generalized IoU (broadcast): IoU - (hull - union) / hull."""
    inter, union = _inter_union(a, b)
    iou = inter / union.clamp(min=_EPS)
    hull = torch.maximum(a[..., 1], b[..., 1]) - torch.minimum(a[..., 0], b[..., 0])
    hull = hull.clamp(min=_EPS)
    return iou - (hull - union).clamp(min=0) / hull


def pairwise_span_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, 2) x (M, 2) -> (N, M) IoU matrix."""
    return span_iou(a[:, None, :], b[None, :, :])


def generalized_span_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, 2) x (M, 2) -> (N, M) GIoU matrix, like detr's ``generalized_box_iou``.

    Spans must be well formed (end >= start); degenerate (zero-length) spans are
    tolerated through an epsilon instead of producing NaN.
    """
    assert (a[:, 1] >= a[:, 0]).all(), "spans in `a` must have end >= start"
    assert (b[:, 1] >= b[:, 0]).all(), "spans in `b` must have end >= start"
    return span_giou(a[:, None, :], b[None, :, :])


def token_spans_to_normalized(spans: torch.Tensor, T: int | torch.Tensor) -> torch.Tensor:
    """Inclusive token indices (b, e) -> continuous [b/T, (e+1)/T] (the dataset's convention)."""
    s = spans.float()
    T = torch.as_tensor(T, dtype=s.dtype, device=s.device)
    return torch.stack([s[..., 0] / T, (s[..., 1] + 1) / T], dim=-1)


def normalized_to_token_spans(spans: torch.Tensor, T: int | torch.Tensor, tol: float = 1e-4) -> torch.Tensor:
    """Continuous [b̂, ê] -> inclusive token indices: b = floor(b̂T), e = ceil(êT) - 1.

    Clamped to [0, T-1] with e >= b.  ``tol`` (in tokens) absorbs float error so
    that an exact target [b/T, (e+1)/T] maps back to (b, e).  ``T`` may be a
    scalar or a tensor broadcastable to ``spans[..., 0]``.
    """
    T = torch.as_tensor(T, dtype=spans.dtype, device=spans.device)
    b = torch.floor(spans[..., 0] * T + tol)
    e = torch.ceil(spans[..., 1] * T - tol) - 1
    hi = (T - 1).expand_as(b) if T.dim() else torch.full_like(b, float(T) - 1)
    b = torch.minimum(b.clamp(min=0), hi)
    e = torch.minimum(torch.maximum(e, b), hi)
    return torch.stack([b, e], dim=-1).long()


def suppress_duplicates(spans: torch.Tensor, scores: torch.Tensor, iou_threshold: float = 0.5) -> list[int]:
    """Greedy non-maximum suppression over (K, 2) continuous spans (inclusive token spans
    (b, e) as [b, e + 1]): the indices kept, best ``scores`` first.

    A set decoder predicts each span once in principle, but a lightly trained one
    repeats spans from several queries; views of scored spans (and a user-facing
    scorer) show one of each.  Metrics never use this: they match every kept query.
    """
    order = torch.argsort(scores, descending=True, stable=True).tolist()
    iou = pairwise_span_iou(spans.float(), spans.float()) if len(spans) else spans.new_zeros(0, 0)
    kept: list[int] = []
    for i in order:
        if all(float(iou[i, j]) <= iou_threshold for j in kept):
            kept.append(i)
    return kept


def span_to_logits(spans: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """[s, e] -> the regression head's logits (x_b, x_w), the inverse of ``logits_to_span``.

    w = e - s = σ(x_w) and s = σ(x_b)·(1 - w): adding an offset to these logits moves a
    reference span and keeps it a valid span inside [0, 1] (iterative refinement in
    inverse-sigmoid space, as Deformable-DETR refines boxes).
    """
    w = (spans[..., 1] - spans[..., 0]).clamp(eps, 1 - eps)
    room = (1 - w).clamp(min=eps)
    frac = (spans[..., 0] / room).clamp(eps, 1 - eps)
    return torch.stack([torch.logit(frac), torch.logit(w)], dim=-1)


def logits_to_span(x: torch.Tensor) -> torch.Tensor:
    """(x_b, x_w) -> [s, e] with w = σ(x_w), s = σ(x_b)·(1 - w), e = s + w."""
    w = x[..., 1].sigmoid()
    s = x[..., 0].sigmoid() * (1 - w)
    return torch.stack([s, s + w], dim=-1)
