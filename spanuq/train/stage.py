"""Two-phase training of the SpanUQ probe (paper §3.2, §4.2).

Warm-up epochs train span detection only (L_reg + L_val); joint epochs add the
MoB NLL, ranking, consistency and UCIR terms.  AdamW + cosine annealing, early
stopping on the dev span AUROC over *every* labelled span (`evaluate.scoring`:
a probe cannot look better by finding fewer, easier spans; patience counted in
the joint phase, where û is trained), seeded and deterministic on CPU.

After training, two things are fitted on dev and stored with the checkpoint
(`calibrate_on_dev`): the validity threshold of kept spans (best detection F1)
and a temperature T for û (σ(logit(û)/T), minimising the soft-label NLL of every
labelled dev span, kept only if it also lowers the NLL of held-out dev answers in
a cross-validation), which every prediction then applies by default.  The best
epoch is saved as a safetensors checkpoint + JSON config, logged to MLflow and
registered as ``spanuq-<backbone>``; the ``champion`` alias moves only if the
same all-span dev AUROC improves.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import random
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config, scoring_settings
from ..metrics.ece import fit_temperature, flag_threshold
from ..metrics.uq import metric_value
from ..evaluate.scoring import all_span_scores, evaluate_predictions
from ..features.dataset import ResponseExample, answers, collate, input_stats, load_examples, training_examples
from ..llm.loading import resolve_device
from ..llm.presets import fused_layers
from ..model.calibration import Calibration
from ..model.checkpoint import save_checkpoint
from ..model.losses import SetCriterion
from ..model.matcher import HungarianMatcher
from ..model.postprocess import Answer, predict, select_spans
from ..model.probe import SpanUQProbe
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from .context_calibration import calibrate_generated_with_context, split_context
from .given_calibration import calibrate_given

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


def cross_validated_temperature(u_true: list[np.ndarray], u_raw: list[np.ndarray], folds: int = 5,
                                seed: int = 0) -> tuple[float, dict]:
    """The temperature of û fitted on every dev span — used only if it helps held-out answers.

    Dev splits are small (15 answers at the CPU default), and a temperature fitted on
    them can make test calibration worse.  So the answers are split into ``folds``
    folds; T is fitted on the others and the soft-label NLL of each held-out fold is
    compared with T = 1.  T is kept only when the held-out NLL improves; else 1.
    """
    from ..metrics.ece import soft_bce
    from ..model.calibration import apply_temperature

    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    y, s = cat(u_true), cat(u_raw)
    if len(y) < 2 or np.ptp(s) == 0 or len(u_true) < 2:
        return 1.0, {"used": False, "reason": "too little dev data"}
    logit = lambda u: np.log(np.clip(u, 1e-6, 1 - 1e-6) / (1 - np.clip(u, 1e-6, 1 - 1e-6)))  # noqa: E731
    order = np.random.default_rng(seed).permutation(len(u_true))
    nll_fit, nll_one = [], []
    for k in range(min(folds, len(u_true))):
        held = set(order[k::folds].tolist())
        yi, si = cat([u_true[i] for i in held]), cat([u_raw[i] for i in held])
        yo, so = cat([u_true[i] for i in range(len(u_true)) if i not in held]), cat(
            [u_raw[i] for i in range(len(u_true)) if i not in held])
        if not len(yi) or len(yo) < 2 or np.ptp(so) == 0:
            continue
        tk = fit_temperature(yo, so)
        nll_fit.append(soft_bce(yi, logit(apply_temperature(si, tk))) * len(yi))
        nll_one.append(soft_bce(yi, logit(si)) * len(yi))
    full = float(fit_temperature(y, s))
    used = bool(nll_fit) and sum(nll_fit) < sum(nll_one)
    cv = {"used": used, "fitted": full, "held_out_nll": float(sum(nll_fit) / len(y)) if nll_fit else None,
          "held_out_nll_t1": float(sum(nll_one) / len(y)) if nll_one else None}
    return (full if used else 1.0), cv


def calibrate_on_dev(model, dev: list[ResponseExample], cfg: Config, device,
                     answer_texts: list[Answer | None] | None = None, given: list[ResponseExample] | None = None,
                     given_texts: list[Answer | None] | None = None) -> tuple[Calibration, dict]:
    """Choose the validity threshold (best dev detection F1 over ``evaluate.threshold_grid``;
    ties go to the threshold nearest 0.5), fit the temperature of û on every labelled dev span
    (`cross_validated_temperature`) and the "likely wrong" threshold (`flag_threshold`), all on
    the backbone's own dev answers ``dev``; with ``given`` (the dev split's given answers), their
    own mapping and threshold (`calibrate_given`). The `Calibration` the checkpoint stores, and
    what the train report records of the choice."""
    from ..evaluate.detection import detection_metrics

    ec = cfg.evaluate
    start = uncalibrated(cfg)
    if not dev:
        return start, {"temperature": 1.0, "validity_threshold": ec.validity_threshold}
    preds = predict(model, dev, start, answer_texts, batch_size=cfg.train.batch_size, device=device)
    gt = [e.spans.numpy() for e in dev]
    f1s = {}
    for thr in ec.threshold_grid:
        shown = [p.spans[select_spans(p.spans, p.validity, thr, ec.dup_iou)] for p in preds]
        f1s[thr] = metric_value(detection_metrics(shown, gt, ec.iou_threshold)["f1"])
    scored = {t: f for t, f in f1s.items() if f is not None}
    thr = max(scored, key=lambda t: (scored[t], -abs(t - 0.5))) if scored else ec.validity_threshold
    for p in preds:
        p.keep = select_spans(p.spans, p.validity, thr, ec.dup_iou)
    raw, _ = all_span_scores(preds, dev, iou_threshold=ec.iou_threshold, key="u_raw")
    temperature, cv = cross_validated_temperature([e.u.numpy() for e in dev], raw)
    calibration = Calibration(temperature, float(thr), ec.dup_iou)
    y = np.concatenate([e.u.numpy() for e in dev])
    flag, flag_info = flag_threshold(y, calibration.scores(np.concatenate(raw)), ec.flag_precision,
                                     ec.positive_threshold)
    calibration = replace(calibration, flag=flag)
    info = {"temperature": temperature, "temperature_cv": cv, "validity_threshold": float(thr),
            "dev_f1_by_threshold": {f"{t:g}": f for t, f in f1s.items()}, "flag": flag, "flag_dev": flag_info}
    if given:
        calibration, info["given"] = calibrate_given(model, given, calibration, cfg, device, given_texts, dev)
    return calibration, info


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
    steps_per_epoch = math.ceil(len(train) / tc.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs * steps_per_epoch))
    gen = torch.Generator().manual_seed(tc.seed)
    best, best_score, best_epoch, bad = None, -math.inf, -1, 0
    history: list[dict] = []
    bar = tqdm(range(epochs), desc="train", unit="epoch", disable=not progress)
    for epoch in bar:
        phase = "warmup" if epoch < tc.warmup_epochs else "joint"
        model.train()
        order = torch.randperm(len(train), generator=gen).tolist()
        sums: dict[str, float] = {}
        t0 = time.perf_counter()
        for s in range(0, len(order), tc.batch_size):
            batch = collate([train[i] for i in order[s: s + tc.batch_size]]).to(device)
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


def run_train(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: labels + features → probe checkpoint, report, MLflow run."""
    from ..label.answer_ids import is_given
    from ..label.sample_answers import parse
    from ..llm.loading import load_tokenizer
    from ..pipeline import tracking
    from ..score.registry import log_probe

    paths = StagePaths.from_config(cfg)
    # answers whose claims could not all be placed on tokens are left out of training:
    # their missing spans would teach "no claim here"
    train, dropped = training_examples(paths.features, paths.labels, cfg.train.given_kinds)
    # dev answers read with sources (`Prompt.context`) get a calibration of their own (`context_calibration`);
    # model selection and the calibrations without sources read the rest
    dev, dev_context = split_context(load_examples(paths.features, paths.labels, ("dev",)))
    dev_given, _ = split_context(load_examples(paths.features, paths.labels, ("dev",), given=True))
    tokenizer = load_tokenizer(cfg)
    if not train:
        raise ValueError(f"no training examples in {paths.labels}; check the label stage's report")
    if cfg.train.num_threads is None:
        torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.perf_counter()
    with tracking.start_run(cfg, run_name=f"train-{cfg.backbone.name}", tags={"stage": "train"}) as run:
        tracking.log_config(cfg)
        model, info = train_probe(cfg, train, dev, progress,
                                  on_epoch=lambda e, row: tracking.log_metrics(
                                      {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "epoch"}, step=e))
        seconds = time.perf_counter() - t0
        device = resolve_device(cfg.train.device)
        dev_answers = answers(tokenizer, dev)
        calibration, calib = calibrate_on_dev(model, dev, cfg, device, dev_answers, dev_given,
                                              answers(tokenizer, dev_given))
        if dev_context:
            calibration, calib["grounded_generated"] = calibrate_generated_with_context(
                model, dev_context, calibration, cfg, device, answers(tokenizer, dev_context))
        dev_metrics = evaluate_model(model, dev, cfg, device, calibration, dev_answers) if dev else None
        summary = dev_summary(dev_metrics, "auroc", "mae", "f1", "coverage", "pair_accuracy")
        dev_auroc = summary["dev_auroc"]
        report = {"backbone": cfg.backbone.name, "n_train": len(train), "n_dev": len(dev),
                  "n_train_sample_answers": sum(parse(e.prompt_id) is not None for e in train),
                  "n_train_given_answers": sum(is_given(e.prompt_id) for e in train), "n_dev_given": len(dev_given),
                  **({"n_dev_with_context": len(dev_context)} if dev_context else {}),
                  "train_dropped_unplaced": dropped, **calib,
                  "train_spans": int(sum(len(e.u) for e in train)),
                  "best_epoch": info["best_epoch"], "epochs_run": info["epochs_run"],
                  "n_parameters": info["n_parameters"], **summary}
        # how this run went (seconds, the MLflow run, the registry's version): the run log, not the report
        run_log = {"seconds": round(seconds, 1), "epoch_seconds": [r["seconds"] for r in info["history"]],
                   "mlflow_run_id": run.info.run_id}
        save_checkpoint(model, cfg.probe, train[0].h.shape[1], paths.probe, calibration,
                        extra={"backbone": cfg.backbone.name, "layers": fused_layers(cfg),
                               "system_prompt": cfg.backbone.system_prompt,
                               "scoring": scoring_settings(cfg),  # what SpanUQ.load scores it with
                               "best_epoch": info["best_epoch"], "dev_auroc": dev_auroc,
                               # the answers' budget (none was longer): longer ones are read in windows of it
                               "window_tokens": cfg.generate.max_new_tokens})
        write_json(paths.probe / "history.json", [{k: v for k, v in r.items() if k != "seconds"}
                                                  for r in info["history"]])
        tracking.log_metrics({"best_dev_auroc": dev_auroc} if dev_auroc is not None else {})
        if cfg.mlflow.register_model:
            run_log.update(log_probe(paths.probe, cfg, dev_auroc=dev_auroc) or {})
        write_json(paths.train_report, report)
        write_json(paths.run_log("train"), run_log)
    return paths.probe
