"""Run a trained probe over examples and return plain per-response predictions."""
from __future__ import annotations

import numpy as np
import torch

from ..features.dataset import ResponseExample, collate
from ..model.span_ops import normalized_to_token_spans


@torch.no_grad()
def predict_examples(model, examples: list[ResponseExample], batch_size: int = 16,
                     device: str | torch.device = "cpu") -> list[dict]:
    """All N query predictions per response (filtering by validity is the caller's job).

    Each dict: ``spans`` (N,2) inclusive token indices, ``u`` (N,), ``validity`` (N,),
    ``nu`` (N,), ``u_seq`` float, ``prompt_id``.
    """
    was_training = model.training
    model.eval()
    out: list[dict] = []
    try:
        for s in range(0, len(examples), batch_size):
            b = collate(examples[s: s + batch_size]).to(device)
            o = model(b.h, b.entropy if model.cfg.use_entropy else None, b.mask, b.lengths)
            tok = normalized_to_token_spans(o["spans"], b.lengths[:, None]).cpu().numpy()
            p = o["validity_logits"].sigmoid().cpu().numpy()
            u, nu, us = o["u"].cpu().numpy(), o["nu"].cpu().numpy(), o["u_seq"].cpu().numpy()
            for i, ex in enumerate(b.examples):
                out.append({"prompt_id": ex.prompt_id, "spans": tok[i].astype(np.int64), "u": u[i].astype(np.float64),
                            "validity": p[i].astype(np.float64), "nu": nu[i].astype(np.float64),
                            "u_seq": float(us[i])})
    finally:
        model.train(was_training)
    return out
