"""SetCriterion: the SpanUQ training loss (paper Eq. 7-9, App. C.1), after detr's ``SetCriterion``.

Per decoder output (each UCIR round, each decoder layer), after Hungarian matching:

    L_reg  = Σ_matched |b̂ - b*|_1 / K  and  L_giou = Σ_matched (1 - GIoU) / K     (K = #targets in batch)
    L_val  = weighted BCE over all B·N queries: target 1 if matched else 0, weight 1 for matched,
             ``no_object_weight`` (0.1) for unmatched, normalised by the sum of weights (as detr)
    L_MoB  = -mean_matched log Σ_j π_j Beta(clamp(u*, ε, 1-ε); α_j, β_j)
    L_rank = mean over pairs (i, j) of max(0, -sign(u*_i - u*_j)(û_i - û_j) + m)

    L_layer = reg·(L_reg + giou·L_giou) + val·L_val + uq·L_MoB + rank·L_rank

Total (phase "joint"):

    L = L_last(round 2) + w₁·L_last(round 1)
      + aux · Σ_{intermediate layers} [L_layer(round 2) + w₁·L_layer(round 1)]
      + con · mean_b (û_seq - u*_seq)²

with w₁ = ``ucir_round1_weight`` (one round and w₁ unused when UCIR is off).  In
phase "warmup" only the detection terms (L_reg, L_giou, L_val) are active and
the matcher ignores the (untrained) uncertainty head.

Ranking pairs (App. C.1, Eq. 9).  Pairs are formed *within* each sequence among
its matched targets: the high group u* > τ_hi (0.3) against the low group
u* < τ_lo (0.1); when either group of that sequence has fewer than 2 spans it
falls back to the top-25% vs the bottom-25% of its spans by u* (at least one
each).  Pairs with equal u* are dropped.  The per-sequence pairs are pooled over
the batch and at most ``rank_max_pairs`` (256) are drawn at random with a seeded
``torch.Generator``.

Consistency.  The probe computes û_seq from detached û, p and q̃, so L_con trains
only the importance MLP (App. C.1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import LossConfig
from .matcher import HungarianMatcher
from .mob import mob_log_prob
from .span_ops import span_giou


def ranking_pairs(u_star: list[torch.Tensor], tau_hi: float = 0.3, tau_lo: float = 0.1) -> list[tuple[int, int, int]]:
    """All stratified (sequence, hi index, lo index) pairs, within each sequence.

    ``u_star[b]`` holds the labels of sequence b's matched spans.  Returns triples
    with ``u_star[b][hi] > u_star[b][lo]``.
    """
    pairs = []
    for b, u in enumerate(u_star):
        if len(u) < 2:
            continue
        hi = (u > tau_hi).nonzero().flatten()
        lo = (u < tau_lo).nonzero().flatten()
        if len(hi) < 2 or len(lo) < 2:  # fallback: top-25% vs bottom-25%
            k = max(1, len(u) // 4)
            order = torch.argsort(u, descending=True, stable=True)
            hi, lo = order[:k], order[-k:]
        ul = u.tolist()
        for i in hi.tolist():
            for j in lo.tolist():
                if ul[i] > ul[j]:
                    pairs.append((b, i, j))
    return pairs


class SetCriterion(nn.Module):
    def __init__(self, cfg: LossConfig, matcher: HungarianMatcher | None = None, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.matcher = matcher or HungarianMatcher.from_config(cfg)
        self.generator = torch.Generator().manual_seed(seed)

    # ---- single decoder output ----------------------------------------------------------
    def layer_losses(self, out: dict, targets: list[dict], phase: str, n_targets: float) -> dict[str, torch.Tensor]:
        """Unweighted loss terms for one decoder output (dict with spans, validity_logits, u, pi, alpha, beta)."""
        joint = phase == "joint"
        indices = self.matcher(out, targets, with_uncertainty=joint)
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for src, _ in indices])
        device = out["spans"].device
        batch_idx, src_idx = batch_idx.to(device), src_idx.to(device)

        pred = out["spans"][batch_idx, src_idx]
        tgt = torch.cat([t["spans"][j] for t, (_, j) in zip(targets, indices)]).to(pred)
        losses = {
            "loss_l1": F.l1_loss(pred, tgt, reduction="sum") / n_targets,
            "loss_giou": (1 - span_giou(pred, tgt)).sum() / n_targets,
        }

        logits = out["validity_logits"]
        y = torch.zeros_like(logits)
        y[batch_idx, src_idx] = 1.0
        w = torch.full_like(logits, self.cfg.no_object_weight)
        w[batch_idx, src_idx] = 1.0
        losses["loss_val"] = (F.binary_cross_entropy_with_logits(logits, y, reduction="none") * w).sum() / w.sum()

        if joint:
            u_star = torch.cat([t["u"][j] for t, (_, j) in zip(targets, indices)]).to(pred)
            u_clamped = u_star.clamp(self.cfg.label_eps, 1 - self.cfg.label_eps)
            if len(u_star):
                logp = mob_log_prob(u_clamped, out["pi"][batch_idx, src_idx], out["alpha"][batch_idx, src_idx],
                                    out["beta"][batch_idx, src_idx])
                losses["loss_uq"] = -logp.mean()
            else:
                losses["loss_uq"] = pred.sum() * 0
            losses["loss_rank"] = self.rank_loss(out["u"], targets, indices)
        return losses

    def rank_loss(self, u_hat: torch.Tensor, targets: list[dict], indices) -> torch.Tensor:
        """Contrastive ranking loss (Eq. 9) over stratified within-sequence pairs."""
        u_star = [t["u"][j].detach().cpu() for t, (_, j) in zip(targets, indices)]
        pairs = ranking_pairs(u_star, self.cfg.rank_tau_hi, self.cfg.rank_tau_lo)
        if not pairs:
            return u_hat.sum() * 0
        if len(pairs) > self.cfg.rank_max_pairs:
            keep = torch.randperm(len(pairs), generator=self.generator)[: self.cfg.rank_max_pairs]
            pairs = [pairs[k] for k in keep.tolist()]
        src = [s.tolist() for s, _ in indices]  # u_star[b][i] belongs to query src[b][i]
        b, qi, qj = (torch.tensor(x, device=u_hat.device)
                     for x in zip(*[(bb, src[bb][ii], src[bb][jj]) for bb, ii, jj in pairs]))
        diff = u_hat[b, qi] - u_hat[b, qj]  # sign(u*_i - u*_j) = +1 by construction
        return F.relu(self.cfg.rank_margin - diff).mean()

    def weighted(self, losses: dict[str, torch.Tensor]) -> torch.Tensor:
        c = self.cfg
        weights = {"loss_l1": c.reg, "loss_giou": c.reg * c.giou, "loss_val": c.val,
                   "loss_uq": c.uq, "loss_rank": c.rank}
        return sum(weights[k] * v for k, v in losses.items())

    # ---- full criterion -------------------------------------------------------------------
    def forward(self, outputs: dict, targets: list[dict], phase: str = "joint") -> tuple[torch.Tensor, dict[str, float]]:
        """outputs: ``SpanUQProbe.forward``'s dict; targets: ``Batch.targets``.

        Returns (total loss, {component: float}).  Components of the last round's
        last layer are reported unweighted as ``loss_l1 ... loss_rank``; ``loss_con``,
        ``loss_aux`` and ``loss_round1`` (weighted) and ``loss`` (the total) besides.
        """
        assert phase in ("warmup", "joint"), phase
        n_targets = max(float(sum(len(t["spans"]) for t in targets)), 1.0)
        rounds = outputs["rounds"]
        round_w = [self.cfg.ucir_round1_weight, 1.0] if len(rounds) == 2 else [1.0]

        total = outputs["spans"].new_zeros(())
        log: dict[str, float] = {}
        aux_total = outputs["spans"].new_zeros(())
        for r, (rout, rw) in enumerate(zip(rounds, round_w)):
            last = self.layer_losses(rout, targets, phase, n_targets)
            lw = self.weighted(last)
            total = total + rw * lw
            if r == len(rounds) - 1:
                log.update({k: float(v.detach()) for k, v in last.items()})
            elif len(rounds) == 2:
                log["loss_round1"] = float(rw * lw.detach())
            for aout in rout["aux"]:
                aux_total = aux_total + rw * self.weighted(self.layer_losses(aout, targets, phase, n_targets))
        total = total + self.cfg.aux * aux_total
        if rounds[0]["aux"]:
            log["loss_aux"] = float(self.cfg.aux * aux_total.detach())
        if phase == "joint":
            u_seq_star = torch.stack([t["u_seq"].float() for t in targets]).to(outputs["u_seq"])
            con = ((outputs["u_seq"] - u_seq_star) ** 2).mean()
            total = total + self.cfg.con * con
            log["loss_con"] = float(con.detach())
        log["loss"] = float(total.detach())
        return total, log
