"""Probes trained from different seeds, read as one probe: the first finds the spans, every one scores them.

At a few hundred training answers one probe's ranking moves with its seed and with the last bits of
its features (which CPU kernels computed them); the mean of a few members' readings moves less.

Member 0's forward gives the queries a reader is shown (spans, validity p, ν: the post-processing is
unchanged).  Every member m scores query i of member 0 by its own queries j, each weighed by how much
it overlaps query i and how valid it is:

    û_m(i) = Σ_j w_ij û_j / Σ_j w_ij,   w_ij = p_j · IoU(span_i, span_j)     (Σ_j w_ij > 0)
           = û_seq,m                                                        (no query of m overlaps i)

(member 0 reads its own û_i), and the ensemble's

    û(i) = (1/M) Σ_m û_m(i),    û_seq = (1/M) Σ_m û_seq,m

are raw readings: the checkpoint's calibration, fitted on dev on these, maps them as any probe's.
The fallback is the evaluate stage's rule (`spanuq.evaluate.scoring`): a span no query covers reads
the answer's û_seq.
"""
from __future__ import annotations

import torch
from torch import nn

from .probe import SpanUQProbe
from .span_ops import pairwise_span_iou


class ProbeEnsemble(nn.Module):
    """``ProbeEnsemble(members)(h, entropy, mask, lengths, surprisal=...)``: a probe's forward dict
    (member 0's) with ``u`` and ``u_seq`` the members' mean readings (module docstring).  For reading
    only: each member is trained alone (`spanuq.train.members`)."""

    def __init__(self, members: list[SpanUQProbe]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one probe")
        if len({(m.d_model, m.cfg.model_dump_json()) for m in members}) != 1:
            raise ValueError("an ensemble's probes must share one configuration and input size")
        self.members = nn.ModuleList(members)
        self.cfg = members[0].cfg
        self.d_model = members[0].d_model

    def forward(self, h: torch.Tensor, entropy: torch.Tensor | None, mask: torch.Tensor,
                lengths: torch.Tensor, targets: list[dict] | None = None,
                surprisal: torch.Tensor | None = None) -> dict:
        if self.training:
            raise RuntimeError("a ProbeEnsemble reads; its members are trained one by one")
        outs = [m(h, entropy, mask, lengths, surprisal=surprisal) for m in self.members]
        first = outs[0]
        u = [first["u"]] + [member_reading(first["spans"], o) for o in outs[1:]]
        return dict(first, u=torch.stack(u).mean(0), u_seq=torch.stack([o["u_seq"] for o in outs]).mean(0))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def member_reading(spans: torch.Tensor, out: dict) -> torch.Tensor:
    """(B, N) û_m of the N query spans ``spans`` (B, N, 2, normalised) by one member's outputs ``out``
    (its ``spans`` (B, M, 2), ``validity_logits``, ``u``, ``u_seq``): the overlap- and validity-weighted
    mean of its û, or its û_seq where none of its queries overlaps (module docstring)."""
    rows = []
    for b in range(spans.shape[0]):
        w = pairwise_span_iou(spans[b], out["spans"][b]) * out["validity_logits"][b].sigmoid()[None, :]  # (N, M)
        total = w.sum(1)
        mean = (w * out["u"][b][None, :]).sum(1) / total.clamp(min=1e-12)
        rows.append(torch.where(total > 1e-12, mean, out["u_seq"][b].expand_as(mean)))
    return torch.stack(rows)
