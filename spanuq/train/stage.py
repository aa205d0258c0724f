"""The `train` stage: labels + features → the probe (`train.members` of them), calibrated on dev.

The probe (or each member) is trained by `spanuq.train.loop.train_probe`.  After training, two
things are fitted on dev and stored with the checkpoint (`calibrate_on_dev`): the validity threshold
of kept spans (best detection F1) and a temperature T for û (σ(logit(û)/T), minimising the
soft-label NLL of every labelled dev span, kept only if it also lowers the NLL of held-out dev
answers in a cross-validation), which every prediction then applies by default.  The checkpoint
is saved as safetensors + JSON config, logged to MLflow and registered as ``spanuq-<backbone>``;
the ``champion`` alias moves only if the same all-span dev AUROC improves.
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..config import Config, scoring_settings
from ..metrics.ece import fit_temperature, flag_threshold
from ..metrics.uq import metric_value
from ..evaluate.scoring import all_span_scores
from ..features.dataset import ResponseExample, answers, load_examples, training_examples
from ..llm.loading import resolve_device
from ..llm.presets import fused_layers
from ..model.calibration import Calibration
from ..model.checkpoint import save_checkpoint
from ..model.postprocess import Answer, predict, select_spans
from ..pipeline.cpus import available_cpus
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from .context_calibration import calibrate_generated_with_context, split_context
from .given_calibration import calibrate_given
from .loop import dev_summary, evaluate_model, uncalibrated
from .members import train_members

log = logging.getLogger(__name__)


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
        torch.set_num_threads(available_cpus())
    t0 = time.perf_counter()
    with tracking.start_run(cfg, run_name=f"train-{cfg.backbone.name}", tags={"stage": "train"}) as run:
        tracking.log_config(cfg)
        model, info = train_members(cfg, train, dev, progress,
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
                  "n_parameters": info["n_parameters"], **summary,
                  **({"members": [{k: m[k] for k in ("seed", "best_epoch", "epochs_run")} for m in info["members"]]}
                     if "members" in info else {})}
        # how this run went (seconds, the MLflow run, the registry's version): the run log, not the report
        run_log = {"seconds": round(seconds, 1), "epoch_seconds": [r["seconds"] for r in info["history"]],
                   "mlflow_run_id": run.info.run_id,
                   **({"member_seconds": [m["seconds"] for m in info["members"]]} if "members" in info else {})}
        save_checkpoint(model, cfg.probe, train[0].h.shape[1], paths.probe, calibration,
                        extra={"backbone": cfg.backbone.name, "layers": fused_layers(cfg),
                               "system_prompt": cfg.backbone.system_prompt,
                               "scoring": scoring_settings(cfg),  # what SpanUQ.load scores it with
                               "best_epoch": info["best_epoch"], "dev_auroc": dev_auroc,
                               **({"member_seeds": [m["seed"] for m in info["members"]]} if "members" in info else {}),
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
