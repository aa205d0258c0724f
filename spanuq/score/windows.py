"""Answers longer than the probe was trained on: windows of the trained length, one merged `Prediction`.

The probe was trained on answers of at most W = ``generate.max_new_tokens`` tokens (128 for
the shipped probe) with N queries, so it can place at most N spans and has never seen a
longer sequence.  An answer of T > W tokens is read as windows of exactly W tokens that
overlap by at least o = W/4 tokens (`plan_windows`: n = ⌈(T − o)/(W − o)⌉ windows, starts
spread evenly from 0 to T − W): every claim is then at least o/2 tokens from the edge of
the window it is taken from (ownership below), and the probe reads ≈ 4/3 of the answer.  The probe runs on each window's slice of the
answer's states — the states themselves come from one pass over the whole answer (or
chunked passes, `spanuq.llm.chunked`), so a late window's tokens still saw the answer
before them — and each window goes through the one post-processing step (`PostProcess`,
with the window's slice of the token offsets, so spans are grown to words and mapped to
characters of the whole answer).  The windows' predictions are merged:

* **ownership**: token t belongs to the window whose centre is nearest (`owned_ranges`:
  the boundaries are the midpoints between consecutive centres, i.e. the middle of each
  overlap), and a window contributes only the queries whose span centre (b + e)/2 it owns.
  A span near a window's edge, where the probe sees half of its context, is thus taken
  from the neighbour that sees it in the middle;
* **duplicates**: the validity threshold and greedy duplicate suppression (token IoU >
  the calibration's ``dup_iou``, ``evaluate.dup_iou`` at training time) are run again over
  the merged queries (`select_spans`), so a claim that straddles a boundary and was
  found by both windows is shown once;
* **û_seq** = Σ_k (|owned_k| / T) · û_seq,k, the owned-token-weighted mean of the windows'
  û_seq (calibrated and raw alike).  The probe's û_seq is trained towards u*_seq, the
  *mean* u* over the answer's claims, so the whole answer's value is the average of its
  parts; weighting by owned tokens counts every token once (claims are spread along the
  answer roughly evenly).  A maximum would grow with the length of the answer alone.

An answer of T ≤ W tokens is one window: `predict_windows` then returns `predict`'s
output unchanged, so short answers score exactly as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..model.calibration import Calibration
from ..model.postprocess import Answer, Prediction, States, predict, select_spans


def plan_windows(T: int, window: int, overlap: int | None = None) -> list[tuple[int, int]]:
    """Token windows [start, end) of exactly ``window`` tokens covering 0..T, consecutive ones
    sharing at least ``overlap`` (default ``window // 4``) tokens; one window [0, T) when T ≤ ``window``."""
    overlap = window // 4 if overlap is None else overlap
    if window < 1 or not 0 <= overlap < window:
        raise ValueError(f"windows need 0 <= overlap < window, got window={window}, overlap={overlap}")
    if T <= window:
        return [(0, T)]
    n = math.ceil((T - overlap) / (window - overlap))
    starts = [round(k * (T - window) / (n - 1)) for k in range(n)]
    return [(s, s + window) for s in starts]


def owned_ranges(windows: Sequence[tuple[int, int]], T: int) -> list[tuple[int, int]]:
    """The tokens [lo, hi) each window owns: those nearer its centre than any other window's
    (boundaries at the midpoints between consecutive centres); they tile 0..T."""
    centres = [(s + e) / 2 for s, e in windows]
    cuts = [0] + [math.ceil((a + b) / 2) for a, b in zip(centres, centres[1:])] + [T]
    return list(zip(cuts[:-1], cuts[1:]))


@dataclass
class _Slice:
    """One window of an answer's states (what `predict` reads)."""

    h: torch.Tensor
    entropy: torch.Tensor
    surprisal: torch.Tensor | None = None
    lookback: torch.Tensor | None = None


def _slice(it, s: int, e: int) -> _Slice:
    sur, lb = getattr(it, "surprisal", None), getattr(it, "lookback", None)
    return _Slice(it.h[s:e], it.entropy[s:e], None if sur is None else sur[s:e], None if lb is None else lb[s:e])


def merge_windows(preds: Sequence[Prediction], windows: Sequence[tuple[int, int]], T: int,
                  calibration: Calibration, prompt_id: str) -> Prediction:
    """One `Prediction` of the whole answer from its windows' (token indices relative to each
    window): owned queries, suppression over the merged set, owned-token-weighted û_seq."""
    owned = owned_ranges(windows, T)
    rows = {k: [] for k in ("spans", "u", "validity", "u_raw", "nu", "chars")}
    for p, (s, _), (lo, hi) in zip(preds, windows, owned):
        spans = p.spans + s
        mid2 = spans[:, 0] + spans[:, 1]  # twice the span centre
        mine = (mid2 >= 2 * lo) & (mid2 < 2 * hi)
        rows["spans"].append(spans[mine])
        rows["u"].append(p.u[mine])
        rows["validity"].append(p.validity[mine])
        rows["u_raw"].append((p.u_raw if p.u_raw is not None else p.u)[mine])
        rows["nu"].append(p.nu[mine] if p.nu is not None else np.full(int(mine.sum()), np.nan))
        if p.chars is not None:
            rows["chars"].append(p.chars[mine])
    cat = {k: np.concatenate(v) if v else None for k, v in rows.items()}
    spans = cat["spans"].astype(np.int64).reshape(-1, 2)
    chars = cat["chars"].astype(np.int64).reshape(-1, 2) if len(rows["chars"]) == len(preds) else None
    w = np.array([hi - lo for lo, hi in owned], dtype=np.float64) / T
    u_seq = float(sum(wk * p.u_seq for wk, p in zip(w, preds)))
    u_seq_raw = float(sum(wk * (p.u_seq_raw if p.u_seq_raw is not None else p.u_seq) for wk, p in zip(w, preds)))
    return Prediction(prompt_id=prompt_id, spans=spans, u=cat["u"], validity=cat["validity"], u_seq=u_seq,
                      keep=select_spans(spans, cat["validity"], calibration.validity_threshold, calibration.dup_iou),
                      u_raw=cat["u_raw"], u_seq_raw=u_seq_raw, nu=cat["nu"], chars=chars,
                      threshold=calibration.validity_threshold)


def predict_windows(probe, items: Sequence[States], calibration: Calibration,
                    answers: Sequence[Answer | None] | None = None, *, window: int, overlap: int | None = None,
                    batch_size: int = 16, device: str | torch.device = "cpu",
                    prompt_ids: Sequence[str] | None = None) -> list[Prediction]:
    """`predict` for answers of any length: one `Prediction` per answer, those longer than
    ``window`` tokens read in windows and merged (module docstring).  All windows of all
    answers go through the probe together, ``batch_size`` at a time."""
    if prompt_ids is None:
        prompt_ids = [str(getattr(it, "prompt_id", i)) for i, it in enumerate(items)]
    plans = [plan_windows(int(it.h.shape[0]), window, overlap) for it in items]
    if all(len(p) == 1 for p in plans):
        return predict(probe, items, calibration, answers, batch_size=batch_size, device=device,
                       prompt_ids=prompt_ids)
    slices, slice_answers, owner = [], [], []
    for i, (it, plan) in enumerate(zip(items, plans)):
        a = answers[i] if answers is not None else None
        for s, e in plan:
            slices.append(_slice(it, s, e))
            slice_answers.append(Answer(a.text, list(a.offsets[s:e])) if a is not None else None)
            owner.append(i)
    preds = predict(probe, slices, calibration, slice_answers, batch_size=batch_size, device=device,
                    prompt_ids=[prompt_ids[i] for i in owner])
    out, k = [], 0
    for i, plan in enumerate(plans):
        part = preds[k: k + len(plan)]
        k += len(plan)
        out.append(part[0] if len(plan) == 1 else
                   merge_windows(part, plan, int(items[i].h.shape[0]), calibration, prompt_ids[i]))
    return out


def window_length(extra: dict, default: int, override: int | None = None) -> int:
    """W: ``override`` (``score.window_tokens``), else the budget of the answers the checkpoint
    was trained on (``extra["window_tokens"]``: the run's ``generate.max_new_tokens``, written by
    the train stage; the evaluate stage reads the same value), else ``default`` (the
    pipeline's ``generate.max_new_tokens``)."""
    if override is not None:
        return int(override)
    return int(extra.get("window_tokens") or default)


def readable(h: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    """(T,) bool: the tokens whose state and entropy are finite (what the probe can read)."""
    return torch.isfinite(h).all(-1) & torch.isfinite(entropy)


def predict_readable(probe, items: Sequence[States], calibration: Calibration,
                     answers: Sequence[Answer | None] | None = None, *, window: int, batch_size: int = 16,
                     device: str | torch.device = "cpu", prompt_ids: Sequence[str] | None = None
                     ) -> list[tuple[Prediction | None, list[tuple[int, int]]]]:
    """`predict_windows` that leaves out the windows with a token whose state is not finite: per
    answer, its `Prediction` over the readable windows (None when none is) and the token ranges
    [start, end) of the windows left out.  Answers whose states are all finite are predicted
    exactly as `predict_windows` predicts them."""
    if prompt_ids is None:
        prompt_ids = [str(getattr(it, "prompt_id", i)) for i, it in enumerate(items)]
    ok = [readable(it.h, it.entropy) for it in items]
    whole = [i for i, m in enumerate(ok) if bool(m.all())]
    out: list = [None] * len(items)
    if whole:
        preds = predict_windows(probe, [items[i] for i in whole], calibration,
                                [answers[i] for i in whole] if answers is not None else None, window=window,
                                batch_size=batch_size, device=device, prompt_ids=[prompt_ids[i] for i in whole])
        for i, p in zip(whole, preds):
            out[i] = (p, [])
    for i, (it, m) in enumerate(zip(items, ok)):
        if out[i] is not None:
            continue
        T = int(it.h.shape[0])
        plan = plan_windows(T, window)
        good = [(s, e) for s, e in plan if bool(m[s:e].all())]
        failed = [(s, e) for s, e in plan if (s, e) not in good]
        if not good:
            out[i] = (None, failed)
            continue
        a = answers[i] if answers is not None else None
        slices = [_slice(it, s, e) for s, e in good]
        parts = predict(probe, slices, calibration,
                        [Answer(a.text, list(a.offsets[s:e])) if a is not None else None for s, e in good],
                        batch_size=batch_size, device=device, prompt_ids=[prompt_ids[i]] * len(good))
        if len(good) == 1 and good[0] == (0, T):
            out[i] = (parts[0], failed)
        else:
            out[i] = (merge_windows(parts, good, T, calibration, prompt_ids[i]), failed)
    return out
