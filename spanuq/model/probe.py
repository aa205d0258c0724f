"""The SpanUQ probe (paper §3.1, App. A): a DETR-style span detector + uncertainty scorer.

    H̄ (B,T,d) [+ token entropy] [+ token surprisal] [--standardise (train mean/std)] --Linear--> (B,T,d_p) + sinusoidal PE
        --2-layer pre-norm encoder--> Z
    N learnable queries --3-layer pre-norm decoder (self-attn, cross-attn on Z, FFN)--> q̂ per layer
    per layer heads:  boundaries (b̂, ê) from q̂
                      soft mask m(t) + mask-weighted attention pool over Z -> c
                      [span_skip: c += Σ_t m̃(t) W_s x_t, the span's own mean input x = [H̄; entropy]]
                      enrichment q̃ = q̂ + σ(W_g q̂ + b_g) ⊙ c
                      validity logit, Mixture-of-Beta (π, α, β) -> û, ν   (from q̃)
    UCIR: q⁽²⁾ = q⁽¹⁾ + MLP_cond(û⁽¹⁾, log ν⁽¹⁾, p⁽¹⁾) through the same decoder and heads;
          û = 0.7 û⁽²⁾ + 0.3 û⁽¹⁾
    sequence: û_seq = Σ_k softmax_k(p_k · MLP_imp(q̃_k)) û_k   (paper; default: softmax_k(log p_k + MLP_imp),
              so invalid queries get no weight, see ``aggregate``)
    reference spans (two-stage query selection, refinement, denoising): queries.py

Positions.  Spans are normalised per example by that example's own length T
(not the padded length): the span of inclusive tokens (b, e) is [b/T, (e+1)/T]
and token t sits at centre c_t = (t + 0.5)/T.

Boundary parametrisation.  The regression head outputs two logits (x_b, x_w) and

    w = σ(x_w),   b̂ = σ(x_b) · (1 - w),   ê = b̂ + w,

i.e. a width w ∈ (0,1) and the start placed inside the free room [0, 1-w]:
(b̂, ê) is always a valid span inside [0, 1] with ê ≥ b̂, with no clamping and no
sorting, so the gradient never vanishes or flips.  (The paper's σ(MLP) -> (b̂, ê)
does not say how ê ≥ b̂ is enforced.)

Pointer ablation (``boundary="pointer"``).  Start and end logits are query·token
dot products s_t = (W_s q̂)ᵀ z_t / √d_p (likewise e_t), softmaxed over the real
tokens of the example; the boundaries are the expected positions (a
differentiable soft-argmax) b̂ = Σ_t P_s(t) · t/T and ê = Σ_t P_e(t) · (t+1)/T,
then sorted so that ê ≥ b̂.

Soft mask, in token units (τ = 10 sharpens over a fraction of a token):

    m_k(t) = σ(τ·T·(c_t - b̂_k)) · σ(τ·T·(ê_k - c_t)),

and the pooled content c_k = Σ_t α_{k,t} z_t with
α_{k,t} = softmax_t(log m_k(t) + q̂_kᵀ W_a z_t / √d_p) over real tokens: the
softmax of log-mask + score equals the normalised m · exp(score) of Eq. 5 but
cannot underflow to 0/0 when a predicted span falls between token centres.
``pooling="mean"`` drops the score term (α ∝ m).

UCIR conditioning uses log ν (ν ranges over orders of magnitude) and the
round-1 values are detached, as in Deformable-DETR's iterative box refinement:
round 1 is trained by its own loss, not through round 2.

Sequence aggregation reads detached û, p and q̃, so the consistency loss on
û_seq trains only MLP_imp (paper App. C.1: "gradients from L_con are detached
from the span-level predictions").  MLP_imp is a single linear layer.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ProbeConfig
from .mob import MLP, MixtureOfBeta
from .queries import (ProposalHead, RefDecoderLayer, build_denoising, denoising_attn_mask, select_proposals,
                      span_position_embedding)
from .span_ops import logits_to_span, span_to_logits


def sinusoidal_position_encoding(T: int, d: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """(T, d) standard sin/cos encoding (Vaswani et al.) of absolute token index."""
    pos = torch.arange(T, device=device, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d, device=device, dtype=torch.float32)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)[:, : d // 2]
    return pe.to(dtype)


class SpanUQProbe(nn.Module):
    """forward(h, entropy, mask, lengths) -> dict (see ``forward``); spans and scores a reader sees come
    from the one post-processing step, `spanuq.model.postprocess.PostProcess`."""

    def __init__(self, cfg: ProbeConfig, d_model: int):
        super().__init__()
        self.cfg = cfg
        self.d_model = d_model
        dp = cfg.d_proj
        d_in = d_model + int(cfg.use_entropy) + int(cfg.use_surprisal)
        if cfg.standardize:  # set from the training data by `set_input_stats`, saved with the weights
            self.register_buffer("input_mean", torch.zeros(d_in))
            self.register_buffer("input_std", torch.ones(d_in))
        self.input_proj = nn.Linear(d_in, dp)
        if cfg.span_skip:  # W_s: each token's own input, pooled by the span's soft mask beside c
            if cfg.enrichment == "off":
                raise ValueError("probe.span_skip adds to the pooled content c: it needs probe.enrichment on "
                                 "(with probe.enrichment=off set probe.span_skip=false too)")
            self.skip_proj = nn.Linear(d_in, dp)
        enc_layer = nn.TransformerEncoderLayer(dp, cfg.n_heads, cfg.d_ffn, cfg.dropout,
                                               batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, cfg.enc_layers, norm=nn.LayerNorm(dp),
                                             enable_nested_tensor=False)
        self.query_embed = nn.Parameter(torch.empty(cfg.n_queries, dp))
        # reference spans (queries.py): two-stage selection, refinement, denoising
        self.use_ref = cfg.query_selection == "two_stage" or cfg.refine or cfg.dn_groups > 0
        if self.use_ref:
            self.decoder_layers = nn.ModuleList(RefDecoderLayer(dp, cfg.n_heads, cfg.d_ffn, cfg.dropout)
                                                for _ in range(cfg.dec_layers))
            self.ref_pos = MLP(dp, dp, dp, num_layers=2)
            if cfg.query_selection == "two_stage":
                self.proposals = ProposalHead(dp)
            else:  # learned anchors (DAB-DETR), spread over the answer
                c = (torch.arange(cfg.n_queries) + 0.5) / cfg.n_queries
                self.anchors = nn.Parameter(span_to_logits(torch.stack([c - 0.05, c + 0.05], -1).clamp(0, 1)))
            if cfg.dn_groups > 0:
                self.dn_embed = nn.Parameter(torch.zeros(dp))
        else:
            self.decoder_layers = nn.ModuleList(
                nn.TransformerDecoderLayer(dp, cfg.n_heads, cfg.d_ffn, cfg.dropout, batch_first=True, norm_first=True)
                for _ in range(cfg.dec_layers)
            )
        self.decoder_norm = nn.LayerNorm(dp)  # applied to every layer's output (detr return_intermediate)

        if cfg.boundary == "regression":
            self.span_head = MLP(dp, dp, 2, num_layers=3)
        else:
            self.start_proj = nn.Linear(dp, dp)
            self.end_proj = nn.Linear(dp, dp)
        if cfg.enrichment != "off":
            if cfg.pooling == "attention":
                self.pool_proj = nn.Linear(dp, dp, bias=False)  # W_a
            if cfg.enrichment == "gate":
                self.gate = nn.Linear(dp, dp)  # W_g, b_g
            elif cfg.enrichment == "concat":
                self.fuse = nn.Linear(2 * dp, dp)
        self.validity_head = nn.Linear(dp, 1)
        self.mob = MixtureOfBeta(dp, 1 if cfg.uncertainty_head == "beta" else cfg.mob_components, cfg.alpha_min)
        self.importance = nn.Linear(dp, 1)  # MLP_imp
        if cfg.ucir:
            self.cond = MLP(3, dp, dp, num_layers=2)  # MLP_cond(û, log ν, p)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.query_embed)
        if self.cfg.boundary == "regression":
            # start from short spans (w = σ(-2) ≈ 0.12 of the answer), as Deformable-DETR starts
            # its boxes small: claims are short, and a wide start makes early matching arbitrary
            last = self.span_head.layers[-1]
            nn.init.zeros_(last.weight)
            nn.init.constant_(last.bias, 0.0)
            if not self.use_ref:  # with references the head starts at offset 0: the reference itself
                nn.init.constant_(last.bias[1:], -2.0)
        for module in (self.encoder, self.decoder_layers):
            for p in module.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    @torch.no_grad()
    def set_input_stats(self, mean: torch.Tensor, std: torch.Tensor, floor: float = 1e-3) -> None:
        """x̃ = (x − mean) / max(std, floor) on every input dimension ([H̄; entropy]) before W_proj."""
        if not self.cfg.standardize:
            raise ValueError("probe.standardize is off: this probe reads its inputs as they are")
        self.input_mean.copy_(mean.to(self.input_mean))
        self.input_std.copy_(std.to(self.input_std).clamp_min(floor))

    # ---- pieces -------------------------------------------------------------------------
    def inputs(self, h: torch.Tensor, entropy: torch.Tensor | None,
               surprisal: torch.Tensor | None = None) -> torch.Tensor:
        """x = [H̄; entropy; surprisal] (the scalars the config asks for), standardised when the
        probe is, (B, T, d_in)."""
        x = h
        if self.cfg.use_entropy:
            ent = entropy if entropy is not None else torch.zeros(h.shape[:2], dtype=h.dtype, device=h.device)
            x = torch.cat([x, ent.unsqueeze(-1).to(h.dtype)], dim=-1)
        if self.cfg.use_surprisal:
            if surprisal is None:
                raise ValueError("this probe reads token surprisal (probe.use_surprisal) and none was given: "
                                 "features stored before it need `spanuq extract` again")
            x = torch.cat([x, surprisal.unsqueeze(-1).to(h.dtype)], dim=-1)
        if self.cfg.standardize:
            x = (x - self.input_mean.to(x.dtype)) / self.input_std.to(x.dtype)
        return x

    def encode(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Z = Enc(W_proj x + P), (B, T, d_p), x from ``inputs``."""
        x = self.input_proj(x)
        x = x + sinusoidal_position_encoding(x.shape[1], x.shape[2], x.device, x.dtype)
        return self.encoder(x, src_key_padding_mask=~mask)

    def _token_grid(self, lengths: torch.Tensor, T_max: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Token index t+0.5 (1,1,T) and each example's length T (B,1,1)."""
        centre = torch.arange(T_max, device=lengths.device, dtype=dtype)[None, None, :] + 0.5
        return centre, lengths.to(dtype)[:, None, None]

    def boundaries(self, q: torch.Tensor, z: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
                   ref: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, 2) normalised [b̂, ê] with 0 <= b̂ <= ê <= 1 (see module docstring).

        With a reference span ``ref`` the regression head predicts an offset to it in
        logit space (queries.py)."""
        if self.cfg.boundary == "regression":
            x = self.span_head(q)
            if ref is not None:
                return logits_to_span(x + span_to_logits(ref))
            w = x[..., 1].sigmoid()
            b = x[..., 0].sigmoid() * (1 - w)
            return torch.stack([b, b + w], dim=-1)
        scale = 1.0 / math.sqrt(q.shape[-1])
        pad = ~mask[:, None, :]
        centre, T = self._token_grid(lengths, z.shape[1], z.dtype)
        p_start = (torch.einsum("bnd,btd->bnt", self.start_proj(q), z) * scale).masked_fill(pad, -math.inf).softmax(-1)
        p_end = (torch.einsum("bnd,btd->bnt", self.end_proj(q), z) * scale).masked_fill(pad, -math.inf).softmax(-1)
        b = (p_start * (centre - 0.5) / T).sum(-1)
        e = (p_end * (centre + 0.5) / T).sum(-1)
        return torch.stack([torch.minimum(b, e), torch.maximum(b, e)], dim=-1)

    def soft_mask_log(self, spans: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """log m_k(t), (B, N, T); -inf on padding."""
        centre, T = self._token_grid(lengths, mask.shape[1], spans.dtype)
        b = spans[..., 0:1] * T  # token units
        e = spans[..., 1:2] * T
        tau = self.cfg.tau
        log_m = F.logsigmoid(tau * (centre - b)) + F.logsigmoid(tau * (e - centre))
        return log_m.masked_fill(~mask[:, None, :], -math.inf)

    def pool(self, q: torch.Tensor, z: torch.Tensor, spans: torch.Tensor, mask: torch.Tensor,
             lengths: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        """Mask-weighted attention pooling (Eq. 5): c_k = Σ_t α_{k,t} z_t, (B, N, d_p); with the span
        skip (``skip`` = W_s x, (B, T, d_p)) also + Σ_t m̃_k(t) W_s x_t, the span's mean input."""
        log_m = self.soft_mask_log(spans, mask, lengths)
        logits = log_m
        if self.cfg.pooling == "attention":
            logits = log_m + torch.einsum("bnd,btd->bnt", self.pool_proj(q), z) / math.sqrt(q.shape[-1])
        c = torch.einsum("bnt,btd->bnd", logits.softmax(-1), z)
        if skip is not None:
            c = c + torch.einsum("bnt,btd->bnd", log_m.softmax(-1), skip)
        return c

    def heads(self, q: torch.Tensor, z: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
              ref: torch.Tensor | None = None, skip: torch.Tensor | None = None) -> dict:
        """All per-query predictions from one decoder output q̂ (B, N, d_p)."""
        spans = self.boundaries(q, z, mask, lengths, ref)
        mode = self.cfg.enrichment
        if mode == "off":
            qt = q
        else:
            c = self.pool(q, z, spans, mask, lengths, skip)
            if mode == "gate":
                qt = q + self.gate(q).sigmoid() * c
            elif mode == "add":
                qt = q + c
            else:  # concat
                qt = self.fuse(torch.cat([q, c], dim=-1))
        out = {"spans": spans, "validity_logits": self.validity_head(qt).squeeze(-1), "query_features": qt}
        out.update(self.mob(qt))
        return out

    def decode(self, queries: torch.Tensor, z: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor,
               skip: torch.Tensor | None = None) -> list[dict]:
        """Run the decoder from ``queries`` (B, N, d_p); heads on every layer's output."""
        outs, x = [], queries
        for layer in self.decoder_layers:
            x = layer(x, z, memory_key_padding_mask=~mask)
            outs.append(self.heads(self.decoder_norm(x), z, mask, lengths, skip=skip))
        return outs

    def decode_ref(self, content: torch.Tensor, ref: torch.Tensor, z: torch.Tensor, mask: torch.Tensor,
                   lengths: torch.Tensor, attn_mask=None, query_padding=None,
                   skip: torch.Tensor | None = None) -> list[dict]:
        """Decoder with reference spans: every layer predicts an offset to its reference;
        with ``refine`` the next layer starts from this layer's (detached) span."""
        outs, x = [], content
        for layer in self.decoder_layers:
            pos = self.ref_pos(span_position_embedding(ref, x.shape[-1]))
            x = layer(x, pos, z, attn_mask, query_padding, ~mask)
            o = self.heads(self.decoder_norm(x), z, mask, lengths, ref, skip)
            outs.append(o)
            if self.cfg.refine:
                ref = o["spans"].detach()
        return outs

    def aggregate(self, qt: torch.Tensor, validity_logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """û_seq = Σ_k w_k û_k on detached inputs (Eq. 8).

        ``seq_weighting="paper"``: w = softmax_k(p_k · MLP_imp(q̃_k)); an invalid query
        (p ≈ 0) still gets weight ∝ exp(0), so with many empty queries their untrained û
        dominate û_seq.  ``"validity"`` (default): w = softmax_k(log p_k + MLP_imp(q̃_k)),
        i.e. w_k ∝ p_k · exp(MLP_imp(q̃_k)): a query with p → 0 gets weight → 0.
        """
        logit = validity_logits.detach()
        imp = self.importance(qt.detach()).squeeze(-1)
        if self.cfg.seq_weighting == "paper":
            w = (logit.sigmoid() * imp).softmax(-1)
        else:
            w = (F.logsigmoid(logit) + imp).softmax(-1)
        return (w * u.detach()).sum(-1), w

    # ---- forward --------------------------------------------------------------------------
    def forward(self, h: torch.Tensor, entropy: torch.Tensor | None, mask: torch.Tensor,
                lengths: torch.Tensor, targets: list[dict] | None = None,
                surprisal: torch.Tensor | None = None) -> dict:
        """h (B,T,d) fused states; entropy (B,T) or None; mask (B,T) bool (True = real token);
        lengths (B,) long; targets (``Batch.targets``): only read in training mode, to
        build denoising queries when ``dn_groups > 0``; surprisal (B,T), read when
        ``probe.use_surprisal``.

        Returns a dict:
          spans (B,N,2) normalised [b̂, ê]; validity_logits (B,N); u (B,N) final û
          (UCIR mix); nu, (B,N) and pi / alpha / beta (B,N,J) of the last round;
          u_seq (B,); seq_weights (B,N); aux: per-intermediate-decoder-layer dicts
          of the last round; rounds: per UCIR round the last layer's dict (keys as
          above plus query_features and its own aux list).  Two-stage adds ``enc``
          (the encoder's per-token proposals: spans (B,T,2), logits (B,T)); denoising
          adds ``dn``: {"rounds": like ``rounds`` for the denoising queries, "meta":
          ``queries.build_denoising``'s dict}.
        """
        x_in = self.inputs(h, entropy, surprisal)
        z = self.encode(x_in, mask)
        skip = self.skip_proj(x_in) if self.cfg.span_skip else None
        B, N = h.shape[0], self.cfg.n_queries
        q1 = self.query_embed.unsqueeze(0).expand(B, -1, -1)
        extra: dict = {}
        if not self.use_ref:
            decode = lambda q: self.decode(q, z, mask, lengths, skip)  # noqa: E731
        else:
            if self.cfg.query_selection == "two_stage":
                extra["enc"] = self.proposals(z, lengths)
                ref = select_proposals(extra["enc"]["spans"], extra["enc"]["logits"], mask, N)
            else:
                ref = logits_to_span(self.anchors).unsqueeze(0).expand(B, -1, -1)
            attn_mask = query_padding = None
            dn = build_denoising(targets, self.cfg.dn_groups, self.cfg.dn_noise, self.cfg.dn_negatives) \
                if self.training and targets is not None and self.cfg.dn_groups > 0 else None
            if dn is not None:
                Q = dn["spans"].shape[1]
                ref = torch.cat([ref, dn["spans"].to(ref)], 1)
                q1 = torch.cat([q1, self.dn_embed.expand(B, Q, -1)], 1)
                attn_mask = denoising_attn_mask(N, dn["groups"], dn["group_size"], h.device)
                query_padding = torch.cat([torch.zeros(B, N, dtype=torch.bool, device=h.device), dn["padding"]], 1)
            decode = lambda q: self.decode_ref(q, ref, z, mask, lengths, attn_mask, query_padding, skip)  # noqa: E731
        layers = decode(q1)
        all_rounds = [layers]
        if self.cfg.ucir:
            r1 = layers[-1]
            cond = torch.stack([r1["u"], r1["nu"].log(), r1["validity_logits"].sigmoid()], dim=-1).detach()
            all_rounds.append(decode(q1 + self.cond(cond)))
        if self.use_ref and dn is not None:
            extra["dn"] = {"rounds": [_round([_slice(o, N, None) for o in ls]) for ls in all_rounds], "meta": dn}
            all_rounds = [[_slice(o, 0, N) for o in ls] for ls in all_rounds]
        rounds = [_round(ls) for ls in all_rounds]
        last = rounds[-1]
        out = {k: last[k] for k in ("spans", "validity_logits", "u", "nu", "pi", "alpha", "beta")}
        if self.cfg.ucir:
            a = self.cfg.ucir_alpha
            out["u"] = a * rounds[1]["u"] + (1 - a) * rounds[0]["u"]
        out["u_seq"], out["seq_weights"] = self.aggregate(last["query_features"], last["validity_logits"], out["u"])
        out["aux"] = last["aux"]
        out["rounds"] = rounds
        out.update(extra)
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _slice(o: dict, lo: int, hi: int | None) -> dict:
    """Queries lo:hi of one decoder output (every per-query tensor is (B, Q, ...))."""
    return {k: v[:, lo:hi] for k, v in o.items()}


def _round(layers: list[dict]) -> dict:
    """One UCIR round: the last layer's dict with the earlier layers under ``aux``."""
    return dict(layers[-1], aux=layers[:-1])
