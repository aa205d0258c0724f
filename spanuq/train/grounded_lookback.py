"""Lookback-Lens features of a slot read after its sources, and whether they add to (û, S, H₀).

Lookback Lens (Chuang et al., 2024) reads, per attention head, how much an answer token looks
back at the context against the answer written so far:

    LR_{l,h}(t) = A_ctx / (A_ctx + A_new),   A_ctx = mean attention of token t on the source tokens,
                                             A_new = mean attention of t on the answer tokens up to t

averaged over the slot's tokens: one value per head (30 layers × 9 heads for SmolLM2-135M), from
the same teacher-forced pass over [rendered sources + question; answer] (attention weights need
the eager implementation). A logistic map on them (standardised, L2) is fitted on the training
subjects and measured on the held-out ones (`grounded_calibration.held_out`), alone and beside
logit(û), S and H₀. This is a measurement (scripts/grounded_lookback.py); the shipped mapping reads
only û, S and H₀.
"""
from __future__ import annotations

import numpy as np
import torch

from ..bench.grounded import GroundedPair


def source_mask(tok, chat: str, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Which tokens of ``chat`` hold source characters (``ranges``: [start, end) in the chat)."""
    offs = tok(chat, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return np.array([any(a < e and b > s for s, e in ranges) for a, b in offs])


@torch.inference_mode()
def lookback_ratios(uq, pairs: list[GroundedPair], batch: int = 4) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """(n twins, layers × heads) lookback ratios of each twin's slot, and (pair id, twin) per row."""
    from ..context.passages import Passage
    from ..context.render import render
    from ..llm.loading import token_offsets

    model, tok = uq.model, uq.tok
    was = model.config._attn_implementation
    model.set_attn_implementation("eager")
    rows, keys = [], []
    try:
        items = []
        for p in pairs:
            pieces = [(i, Passage(str(i), t), 0, len(t)) for i, t in enumerate(p.context, 1)]
            r = render(tok, [{"role": "user", "content": p.prompt}], pieces, uq.system_prompt)
            ctx = source_mask(tok, r.chat, [(x.chat_start, x.chat_end) for x in r.read])
            for name, t in (("correct", p.correct), ("planted", p.planted)):
                ids, offs = token_offsets(tok, t.text)
                slot = [k for k, (a, b) in enumerate(offs) if b > t.slot[0] and a < t.slot[1]]
                items.append((r.chat, ctx, ids, slot))
                keys.append((p.id, name))
        for s in range(0, len(items), batch):
            chunk = items[s: s + batch]
            for chat, ctx, ids, slot in chunk:  # one at a time: attention maps are (heads, T, T) per layer
                pids = tok(chat, add_special_tokens=False)["input_ids"]
                x = torch.tensor([pids + list(ids)])
                att = model(input_ids=x, output_attentions=True).attentions  # layers × (1, H, T, T)
                a = torch.stack([l[0] for l in att]).float()  # (L, H, T, T)
                n = len(pids)
                c = torch.tensor(np.flatnonzero(ctx))
                ratios = []
                for k in slot:
                    q = n + k
                    a_ctx = a[:, :, q, c].mean(-1)
                    a_new = a[:, :, q, n: q + 1].mean(-1)
                    ratios.append(a_ctx / (a_ctx + a_new + 1e-12))
                rows.append(torch.stack(ratios).mean(0).flatten().numpy())
    finally:
        model.set_attn_implementation(was)
    return np.stack(rows), keys


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(weights, bias, mean, scale) of an L2 logistic regression on standardised ``x``."""
    from scipy.optimize import minimize
    from scipy.special import expit

    mu, sd = x.mean(0), x.std(0) + 1e-9
    z = (x - mu) / sd

    def loss(theta):
        w, b = theta[:-1], theta[-1]
        p = np.clip(expit(z @ w + b), 1e-9, 1 - 1e-9)
        g = p - y
        return (-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)) + l2 * (w @ w) / (2 * len(y)),
                np.r_[z.T @ g / len(y) + l2 * w / len(y), g.mean()])

    res = minimize(loss, np.zeros(z.shape[1] + 1), jac=True, method="L-BFGS-B")
    return res.x[:-1], float(res.x[-1]), mu, sd


def predict_logistic(model, x: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    w, b, mu, sd = model
    return expit(((x - mu) / sd) @ w + b)
