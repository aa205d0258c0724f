"""Hungarian matching between predicted span queries and target spans.

Modelled on detr's ``models/matcher.py``.  For every (query i, target j) pair

    C[i, j] = cost_span · |b̂_i - b_j|_1
            + cost_giou · (-GIoU(b̂_i, b_j))
            + cost_u    · |û_i - u*_j|                 (only when ``with_uncertainty``)
            + cost_val  · softplus(-l_i)                = -log σ(l_i), the BCE of
                                                          calling query i valid

and ``scipy.optimize.linear_sum_assignment`` picks the one-to-one assignment of
minimum total cost per example.  During warm-up the uncertainty head is still
untrained, so the criterion matches without the uncertainty term.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import nn

from .span_ops import generalized_span_iou


class HungarianMatcher(nn.Module):
    def __init__(self, cost_span: float = 1.0, cost_giou: float = 1.0, cost_u: float = 1.0, cost_val: float = 1.0):
        super().__init__()
        self.cost_span = cost_span
        self.cost_giou = cost_giou
        self.cost_u = cost_u
        self.cost_val = cost_val
        assert cost_span != 0 or cost_giou != 0 or cost_val != 0, "all costs can't be 0"

    @classmethod
    def from_config(cls, loss_cfg) -> "HungarianMatcher":
        return cls(loss_cfg.cost_span, loss_cfg.cost_giou, loss_cfg.cost_u, loss_cfg.cost_val)

    def cost_matrix(self, outputs: dict, targets: list[dict], with_uncertainty: bool = True) -> list[torch.Tensor]:
        """Per example a (N, K_b) cost matrix (float, on CPU)."""
        B, N = outputs["spans"].shape[:2]
        out_spans = outputs["spans"].flatten(0, 1)  # (B*N, 2)
        out_val = F.softplus(-outputs["validity_logits"].flatten(0, 1))  # -log p_valid, (B*N,)
        tgt_spans = torch.cat([t["spans"] for t in targets]).to(out_spans)
        sizes = [len(t["spans"]) for t in targets]

        C = self.cost_span * torch.cdist(out_spans, tgt_spans, p=1)
        if len(tgt_spans):
            C = C - self.cost_giou * generalized_span_iou(out_spans, tgt_spans)
        C = C + self.cost_val * out_val[:, None]
        if with_uncertainty and self.cost_u:
            tgt_u = torch.cat([t["u"] for t in targets]).to(out_spans)
            C = C + self.cost_u * (outputs["u"].flatten(0, 1)[:, None] - tgt_u[None, :]).abs()
        C = C.view(B, N, sum(sizes)).cpu()
        return [c[i] for i, c in enumerate(C.split(sizes, -1))]

    @torch.no_grad()
    def forward(self, outputs: dict, targets: list[dict], with_uncertainty: bool = True
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Match predictions to targets.

        outputs: ``spans`` (B, N, 2), ``validity_logits`` (B, N), ``u`` (B, N).
        targets: per example ``spans`` (K_b, 2) normalised and ``u`` (K_b,).
        Returns per example ``(pred_idx, tgt_idx)``, int64 tensors of length
        min(N, K_b) (empty for an example without targets), pred_idx ascending.
        """
        out = []
        for c in self.cost_matrix(outputs, targets, with_uncertainty):
            if c.shape[1] == 0:
                out.append((torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)))
                continue
            i, j = linear_sum_assignment(c.double().numpy())
            out.append((torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)))
        return out
