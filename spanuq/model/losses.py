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

with w₁ = ``ucir_round1_weight`` (one round and w₁ unused when UCIR is off).  With
``ucir_shared_match`` (default) the last layers of both rounds use round 2's Hungarian
assignment, since û mixes the rounds query by query (``round_indices``).  Two-stage
proposals add enc·(BCE_obj + reg·(L1 + giou·(1-GIoU))) and denoising queries add
dn·Σ (their reconstruction loss), both in every phase (docs/detector.md).  In
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
from .queries import dense_proposal_targets
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
    def layer_losses(self, out: dict, targets: list[dict], phase: str, n_targets: float,
                     indices: list | None = None) -> dict[str, torch.Tensor]:
        """Unweighted loss terms for one decoder output (dict with spans, validity_logits, u, pi, alpha, beta).

        ``indices``: a Hungarian assignment to reuse (UCIR's shared matching); None matches here."""
        joint = phase == "joint"
        if indices is None:
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

    def round_indices(self, rounds: list[dict], targets: list[dict], phase: str) -> list:
        """The assignment each UCIR round's last layer is trained with.

        û = 0.7 û⁽²⁾ + 0.3 û⁽¹⁾ mixes the rounds query by query, so with
        ``ucir_shared_match`` both rounds use round 2's assignment (query k binds the
        same span in both); otherwise each round is matched on its own (the paper)."""
        joint = phase == "joint"
        if len(rounds) == 2 and self.cfg.ucir_shared_match:
            shared = self.matcher(rounds[-1], targets, with_uncertainty=joint)
            return [shared, shared]
        return [self.matcher(r, targets, with_uncertainty=joint) for r in rounds]

    def proposal_losses(self, enc: dict, targets: list[dict], lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """Two-stage encoder proposals, dense (FCOS-style, queries.dense_proposal_targets):
        BCE of "inside a labelled span" over real tokens; L1 + (1 - GIoU) of the proposal
        against its span over positive tokens."""
        T = enc["logits"].shape[1]
        pos, tgt = dense_proposal_targets(targets, lengths.cpu(), T)
        device = enc["logits"].device
        pos, tgt = pos.to(device), tgt.to(enc["spans"])
        real = torch.arange(T, device=device)[None, :] < lengths.to(device)[:, None]
        bce = F.binary_cross_entropy_with_logits(enc["logits"][real], pos[real].float())
        n = max(int(pos.sum()), 1)
        p, t = enc["spans"][pos], tgt[pos]
        return {"enc_obj": bce, "enc_l1": F.l1_loss(p, t, reduction="sum") / n,
                "enc_giou": (1 - span_giou(p, t)).sum() / n}

    def denoising_losses(self, out: dict, meta: dict, targets: list[dict], phase: str) -> torch.Tensor:
        """Reconstruction loss of one decoder output's denoising queries (no matching):
        positives regress their source span (L1 + GIoU), are valid and fit its u*;
        negatives (``dn_negatives``) are invalid.  Weighted like ``layer_losses``."""
        keep = ~meta["padding"]
        pos = meta["positive"] & keep
        b, q = pos.nonzero(as_tuple=True)
        src = meta["target"][b, q]
        tgt = torch.stack([targets[i]["spans"][j] for i, j in zip(b.tolist(), src.tolist())]).to(out["spans"]) \
            if len(b) else out["spans"].new_zeros(0, 2)
        n = max(float(len(b)), 1.0)
        pred = out["spans"][b, q]
        losses = {"loss_l1": F.l1_loss(pred, tgt, reduction="sum") / n,
                  "loss_giou": (1 - span_giou(pred, tgt)).sum() / n}
        logits = out["validity_logits"][keep]
        losses["loss_val"] = F.binary_cross_entropy_with_logits(logits, pos[keep].float())
        if phase == "joint" and len(b):
            u_star = torch.stack([targets[i]["u"][j] for i, j in zip(b.tolist(), src.tolist())]).to(pred)
            u_star = u_star.clamp(self.cfg.label_eps, 1 - self.cfg.label_eps)
            losses["loss_uq"] = -mob_log_prob(u_star, out["pi"][b, q], out["alpha"][b, q], out["beta"][b, q]).mean()
        return self.weighted(losses)

    # ---- full criterion -------------------------------------------------------------------
    def forward(self, outputs: dict, targets: list[dict], phase: str = "joint",
                lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """outputs: ``SpanUQProbe.forward``'s dict; targets: ``Batch.targets``; lengths
        (``Batch.lengths``) needed only for two-stage proposals (``outputs["enc"]``).

        Returns (total loss, {component: float}).  Components of the last round's
        last layer are reported unweighted as ``loss_l1 ... loss_rank``; ``loss_con``,
        ``loss_aux``, ``loss_round1``, ``loss_enc`` and ``loss_dn`` (weighted) and
        ``loss`` (the total) besides.
        """
        assert phase in ("warmup", "joint"), phase
        n_targets = max(float(sum(len(t["spans"]) for t in targets)), 1.0)
        rounds = outputs["rounds"]
        round_w = [self.cfg.ucir_round1_weight, 1.0] if len(rounds) == 2 else [1.0]
        indices = self.round_indices(rounds, targets, phase)

        total = outputs["spans"].new_zeros(())
        log: dict[str, float] = {}
        aux_total = outputs["spans"].new_zeros(())
        for r, (rout, rw) in enumerate(zip(rounds, round_w)):
            last = self.layer_losses(rout, targets, phase, n_targets, indices[r])
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
        if "enc" in outputs:
            if lengths is None:
                raise ValueError("two-stage proposals need the batch lengths: criterion(out, targets, phase, lengths)")
            parts = self.proposal_losses(outputs["enc"], targets, lengths)
            enc = parts["enc_obj"] + self.cfg.reg * (parts["enc_l1"] + self.cfg.giou * parts["enc_giou"])
            total = total + self.cfg.enc * enc
            log["loss_enc"] = float(self.cfg.enc * enc.detach())
        if "dn" in outputs:
            dn = outputs["spans"].new_zeros(())
            for rout, rw in zip(outputs["dn"]["rounds"], round_w):
                dn = dn + rw * self.denoising_losses(rout, outputs["dn"]["meta"], targets, phase)
                for aout in rout["aux"]:
                    dn = dn + rw * self.cfg.aux * self.denoising_losses(aout, outputs["dn"]["meta"], targets, phase)
            total = total + self.cfg.dn * dn
            log["loss_dn"] = float(self.cfg.dn * dn.detach())
        if phase == "joint":
            u_seq_star = torch.stack([t["u_seq"].float() for t in targets]).to(outputs["u_seq"])
            con = ((outputs["u_seq"] - u_seq_star) ** 2).mean()
            total = total + self.cfg.con * con
            log["loss_con"] = float(con.detach())
        log["loss"] = float(total.detach())
        return total, log
