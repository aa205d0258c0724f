"""The one inference path: probe outputs → per-response predictions.

Every consumer (training's dev selection, the evaluate stage, the MLflow model,
the score API) turns the probe's raw outputs into spans here, so they all see the
same thing:

* ``u_raw``: the MoB mean û of each query; ``u``: the calibrated score
  σ(logit(û_raw) / T) with the temperature T fitted on dev and stored in the
  checkpoint (T = 1 leaves û unchanged); ``u_seq`` likewise;
* ``spans``: inclusive token indices (b, e) = (⌊b̂T⌋, ⌈êT⌉ − 1), grown to whole
  words when the response text is known (`snap_token_span`);
* ``keep``: the queries a reader sees — validity p ≥ the threshold chosen on
  dev (stored in the checkpoint), minus duplicates (a kept span whose token IoU
  with a higher-validity kept span exceeds ``dup_iou`` is dropped).

All N queries are returned (``keep`` marks the shown ones) so that metrics and
plots can also look at what was not kept.
"""
from __future__ import annotations

import numpy as np
import torch

from ..features.dataset import ResponseExample, collate
from ..model.span_ops import normalized_to_token_spans, suppress_duplicates
from .ece import apply_temperature

DEFAULT_THRESHOLD = 0.5
DEFAULT_DUP_IOU = 0.5


def calibration(model) -> tuple[float, float]:
    """(temperature, validity threshold) carried by a loaded probe (1.0, 0.5 when absent)."""
    return float(getattr(model, "temperature", 1.0) or 1.0), float(getattr(model, "validity_threshold",
                                                                         DEFAULT_THRESHOLD))


def calibrate(u_raw: np.ndarray, temperature: float) -> np.ndarray:
    """σ(logit(û) / T); T = 1 returns û unchanged."""
    return np.asarray(u_raw, dtype=np.float64) if temperature == 1.0 else apply_temperature(u_raw, temperature)


def select_spans(spans: np.ndarray, validity: np.ndarray, threshold: float = DEFAULT_THRESHOLD,
                 dup_iou: float = DEFAULT_DUP_IOU) -> np.ndarray:
    """Indices of the kept queries, in query order: validity ≥ threshold, then greedy
    duplicate suppression by validity over inclusive token spans (IoU > dup_iou)."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    validity = np.asarray(validity, dtype=np.float64).reshape(-1)
    cand = np.flatnonzero(validity >= threshold)
    if len(cand) == 0:
        return cand
    cont = torch.as_tensor(spans[cand], dtype=torch.float32) + torch.tensor([0.0, 1.0])
    kept = suppress_duplicates(cont, torch.as_tensor(validity[cand]), dup_iou)
    return np.sort(cand[kept])


def snap_token_span(offsets: list[tuple[int, int]], text: str, b: int, e: int) -> tuple[int, int]:
    """Grow the inclusive token span (b, e) to whole words and trim edge tokens that hold
    only spaces or punctuation.

    A token continues a word when its first character is alphanumeric and the
    character just before it (the previous token's last) is too; the span grows
    left while its first token continues a word and right while the next token does.
    """
    n = len(offsets)

    def continues(t: int) -> bool:
        s = offsets[t][0]
        return 0 < s < len(text) and text[s].isalnum() and text[s - 1].isalnum()

    while b > 0 and continues(b):
        b -= 1
    while e + 1 < n and continues(e + 1):
        e += 1

    def blank(t: int) -> bool:
        s, x = offsets[t]
        return not any(ch.isalnum() for ch in text[s:x])

    while b < e and blank(b):
        b += 1
    while e > b and blank(e):
        e -= 1
    return b, e


@torch.no_grad()
def predict_examples(model, examples: list[ResponseExample], batch_size: int = 16,
                     device: str | torch.device = "cpu", *, tokenizer=None, calibrated: bool = True,
                     threshold: float | None = None, dup_iou: float = DEFAULT_DUP_IOU) -> list[dict]:
    """Predictions of every query per response (see the module docstring).

    Each dict: ``prompt_id``, ``spans`` (N, 2) inclusive token indices, ``u`` (N,)
    (calibrated unless ``calibrated=False``), ``u_raw``, ``validity``, ``nu``,
    ``u_seq``, ``u_seq_raw``, ``keep`` (indices of the shown queries),
    ``threshold``.  ``tokenizer``: snap spans to whole words of ``example.response``
    (skipped for an example whose response it does not re-tokenise to its token ids).
    ``threshold``: override the checkpoint's validity threshold.
    """
    temperature, stored = calibration(model)
    thr = stored if threshold is None else float(threshold)
    t = temperature if calibrated else 1.0
    was_training = model.training
    model.eval()
    out: list[dict] = []
    try:
        for s in range(0, len(examples), batch_size):
            b = collate(examples[s: s + batch_size]).to(device)
            o = model(b.h, b.entropy if model.cfg.use_entropy else None, b.mask, b.lengths)
            tok = normalized_to_token_spans(o["spans"], b.lengths[:, None]).cpu().numpy()
            p = o["validity_logits"].sigmoid().cpu().numpy().astype(np.float64)
            u_raw = o["u"].cpu().numpy().astype(np.float64)
            nu, us = o["nu"].cpu().numpy().astype(np.float64), o["u_seq"].cpu().numpy().astype(np.float64)
            for i, ex in enumerate(b.examples):
                spans = tok[i].astype(np.int64)
                if tokenizer is not None and ex.response:
                    spans = _snapped(tokenizer, ex, spans)
                out.append({"prompt_id": ex.prompt_id, "spans": spans, "u": calibrate(u_raw[i], t),
                            "u_raw": u_raw[i], "validity": p[i], "nu": nu[i],
                            "u_seq": float(calibrate(np.array([us[i]]), t)[0]), "u_seq_raw": float(us[i]),
                            "keep": select_spans(spans, p[i], thr, dup_iou), "threshold": thr})
    finally:
        model.train(was_training)
    return out


def _snapped(tokenizer, ex: ResponseExample, spans: np.ndarray) -> np.ndarray:
    from ..label.targets import token_offsets

    ids, offsets = token_offsets(tokenizer, ex.response)
    if ids != list(ex.token_ids):
        return spans
    return np.array([snap_token_span(offsets, ex.response, int(b), int(e)) for b, e in spans],
                    dtype=np.int64).reshape(-1, 2)
