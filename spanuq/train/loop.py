"""The training loop of one probe (paper §3.2, §4.2): warm-up, then joint epochs, the best epoch on dev.

Warm-up epochs train span detection only (L_reg + L_val); joint epochs add the MoB NLL, ranking,
consistency and UCIR terms.  AdamW + cosine annealing, early stopping on the dev span AUROC over
*every* labelled span (`evaluate.scoring`: a probe cannot look better by finding fewer, easier spans;
patience counted in the joint phase, where û is trained), seeded and deterministic on CPU.  The train
stage (`spanuq.train.stage`), its members (`spanuq.train.members`), the sweep's trials, `spanuq
ablate` and the cross-validation all train through `train_probe`.
"""
from __future__ import annotations

import copy
import logging
import math
import random
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config
from ..evaluate.scoring import evaluate_predictions
from ..features.dataset import ResponseExample, collate, input_stats
from ..llm.loading import resolve_device
from ..metrics.uq import metric_value
from ..model.calibration import Calibration
from ..model.losses import SetCriterion
from ..model.matcher import HungarianMatcher
from ..model.postprocess import Answer, predict
from ..model.probe import SpanUQProbe

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def dev_score(metrics: dict, select: str = "auroc") -> float:
    """Model-selection score on dev.

    ``auroc`` (the paper): span AUROC, or Spearman ρ_s when AUROC is undefined (one class).
    ``auroc-mae``: AUROC − MAE, which also rewards calibration; on a dev split of a few
    dozen spans AUROC alone is noisy and stops at the first lucky joint epoch, before
    the Mixture-of-Beta means have converged.
    """
    score = -math.inf
    for key in ("auroc", "spearman"):
        v = metric_value(metrics, "span", key)
        if v is not None:
            score = float(v)
            break
    if select == "auroc-mae" and math.isfinite(score):
        mae = metric_value(metrics, "span", "mae")
        score -= float(mae) if mae is not None else 1.0
    return score


def uncalibrated(cfg: Config) -> Calibration:
    """What a probe is shown with before `calibrate_on_dev`: raw û, ``evaluate.validity_threshold``."""
    return Calibration(1.0, cfg.evaluate.validity_threshold, cfg.evaluate.dup_iou)


def evaluate_model(model, examples: list[ResponseExample], cfg: Config, device, calibration: Calibration | None = None,
                   answer_texts: list[Answer | None] | None = None, bootstrap: int = 0) -> dict:
    """Metrics of the model's predictions with ``calibration`` (default: `uncalibrated`);
    ``answer_texts`` (`features.dataset.answers`) grow spans to whole words as the product does."""
    preds = predict(model, examples, calibration or uncalibrated(cfg), answer_texts, batch_size=cfg.train.batch_size,
                    device=device)
    return evaluate_predictions(preds, examples, cfg.evaluate, bootstrap=bootstrap)


def epoch_batches(lengths: list[int], batch_size: int, pool: int, gen: torch.Generator) -> list[list[int]]:
    """One epoch's batches of example indices.  ``pool`` = 0: the random order cut into batches.
    ``pool`` > 0: the random order cut into pools of ``pool`` batches, each pool sorted by length (stable,
    so ties keep the random order) and cut into batches, and the batches shuffled: alike lengths share a
    batch while which answers meet, and in what order the batches come, still change every epoch."""
    order = torch.randperm(len(lengths), generator=gen).tolist()
    if pool <= 0:
        return [order[s: s + batch_size] for s in range(0, len(order), batch_size)]
    span = pool * batch_size
    batches = []
    for s in range(0, len(order), span):
        chunk = sorted(order[s: s + span], key=lambda i: lengths[i])
        batches += [chunk[j: j + batch_size] for j in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def train_probe(cfg: Config, train: list[ResponseExample], dev: list[ResponseExample],
                progress: bool = True, on_epoch=None) -> tuple[SpanUQProbe, dict]:
    """Train and return (best model, history). `on_epoch(epoch, metrics)` is called each epoch."""
    tc = cfg.train
    seed_everything(tc.seed)
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    device = resolve_device(tc.device)
    d_model = train[0].h.shape[1]
    model = SpanUQProbe(cfg.probe, d_model)
    if cfg.probe.standardize:
        model.set_input_stats(*input_stats(train, cfg.probe.use_entropy, cfg.probe.use_surprisal))
    model = model.to(device)
    criterion = SetCriterion(cfg.loss, HungarianMatcher.from_config(cfg.loss), seed=tc.seed)
    ema = None
    if tc.ema_decay:  # θ̄ ← d·θ̄ + (1 − d)·θ after every step; buffers (input statistics) are copied
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(tc.ema_decay))
    kept = ema.module if ema is not None else model  # what dev sees and what is returned
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    epochs = tc.warmup_epochs + tc.joint_epochs
    lengths = [e.n_tokens for e in train]
    # every epoch has as many batches (the count does not depend on the order)
    steps_per_epoch = len(epoch_batches(lengths, tc.batch_size, tc.length_pool, torch.Generator()))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs * steps_per_epoch))
    gen = torch.Generator().manual_seed(tc.seed)
    best, best_score, best_epoch, bad = None, -math.inf, -1, 0
    history: list[dict] = []
    bar = tqdm(range(epochs), desc="train", unit="epoch", disable=not progress)
    for epoch in bar:
        phase = "warmup" if epoch < tc.warmup_epochs else "joint"
        model.train()
        sums: dict[str, float] = {}
        t0 = time.perf_counter()
        for idx in epoch_batches(lengths, tc.batch_size, tc.length_pool, gen):
            batch = collate([train[i] for i in idx]).to(device)
            out = model(batch.h, batch.entropy if cfg.probe.use_entropy else None, batch.mask, batch.lengths,
                        targets=batch.targets,  # targets: denoising queries (probe.dn_groups)
                        surprisal=batch.surprisal if cfg.probe.use_surprisal else None)
            loss, parts = criterion(out, batch.targets, phase=phase, lengths=batch.lengths)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if tc.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            opt.step()
            sched.step()
            if ema is not None:
                ema.update_parameters(model)
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
        n_steps = max(1, steps_per_epoch)
        row = {"epoch": epoch + 1, "phase": phase, "seconds": round(time.perf_counter() - t0, 2),
               "lr": opt.param_groups[0]["lr"], **{f"train_{k}": v / n_steps for k, v in sums.items()}}
        dev_metrics = evaluate_model(kept, dev, cfg, device) if dev else None
        if dev_metrics:
            row.update(dev_summary(dev_metrics, "auroc", "mae", "spearman", "f1", "coverage"))
        history.append(row)
        if on_epoch:
            on_epoch(epoch + 1, row)
        bar.set_postfix(loss=f"{row.get('train_loss', float('nan')):.3f}", auroc=row.get("dev_auroc"))
        if phase == "warmup":
            continue
        score = dev_score(dev_metrics, tc.select) if dev_metrics else -row.get("train_loss", 0.0)
        if score > best_score or best is None:
            best_score, best_epoch, bad = score, epoch + 1, 0
            best = copy.deepcopy(kept.state_dict())
        else:
            bad += 1
            if bad >= tc.patience:
                log.info("early stopping at epoch %d (best %d)", epoch + 1, best_epoch)
                break
    if best is not None:
        model.load_state_dict(best)
    model.eval()
    return model, {"history": history, "best_epoch": best_epoch, "best_dev_score": best_score,
                   "epochs_run": len(history), "n_parameters": model.num_parameters()}


DEV_METRICS = {"auroc": ("span", "auroc"), "mae": ("span", "mae"), "spearman": ("span", "spearman"),
               "f1": ("detection", "f1"), "coverage": ("coverage",), "pair_accuracy": ("span", "pair_accuracy")}


def dev_summary(metrics: dict | None, *names: str) -> dict[str, float | None]:
    """``{"dev_<name>": value}`` of the named `DEV_METRICS` (None without dev metrics)."""
    return {f"dev_{n}": metric_value(metrics, *DEV_METRICS[n]) if metrics else None for n in names}
