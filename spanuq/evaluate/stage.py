"""The `evaluate` stage: the trained probe and the reference baselines on the test split.

* SpanUQ: the checkpoint's default predictions (validity threshold and
  temperature fitted on dev at train time, duplicates suppressed, spans snapped
  to words); span metrics over **every** labelled test span (`scoring`), with
  within-answer pair accuracy, ECE of the calibrated scores beside the raw ECE,
  the matched-pairs figures and coverage as secondary columns, detection
  P/R/F1 and sequence metrics of û_seq.
* Baselines (``evaluate.baselines``): fitted on train (and dev), scored on the
  same labelled test spans by the same code; ``surface_prior`` is the floor any
  reader of the answer must clear (prompt overlap, position, length, domain);
  their ECE_cal uses a temperature fitted on their own dev scores.

Writes ``metrics.json`` (DVC metrics; every number JSON-safe, undefined metrics
say why), ``plots/eval/`` (ROC, reliability, u* vs û, scored example answers),
logs everything to MLflow, and prints the table.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from ..config import Config
from ..features.dataset import ResponseExample, load_examples
from ..pipeline.files import write_json
from ..llm.loading import resolve_device
from ..model import load_checkpoint
from ..pipeline.paths import StagePaths
from .ece import fit_temperature
from .plots import reliability_plot, roc_plot, scatter_plot
from .predict import predict_examples
from .scoring import all_span_scores, evaluate_predictions, span_level_metrics
from .table import format_table

log = logging.getLogger(__name__)


def _temperature(u_true: np.ndarray, u_pred: np.ndarray) -> float | None:
    """A baseline's T fitted on its dev scores, or None when dev has too little to fit on."""
    if len(u_true) < 2 or np.ptp(u_pred) == 0 or not ((u_pred >= 0) & (u_pred <= 1)).all():
        return None
    return float(fit_temperature(u_true, u_pred))


def evaluate_probe(cfg: Config, model, test: list[ResponseExample], device, tokenizer=None
                   ) -> tuple[dict, list[dict], dict]:
    """(metrics, test predictions, all-span test scores {"u_true", "u", "u_raw"}) of the probe."""
    ec = cfg.evaluate
    preds = predict_examples(model, test, cfg.train.batch_size, device, tokenizer=tokenizer, dup_iou=ec.dup_iou)
    metrics = evaluate_predictions(preds, test, ec, bootstrap=ec.bootstrap)
    u, _ = all_span_scores(preds, test, iou_threshold=ec.iou_threshold)
    u_raw, _ = all_span_scores(preds, test, iou_threshold=ec.iou_threshold, key="u_raw")
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    scores = {"u_true": cat([e.u.numpy() for e in test]), "u": cat(u), "u_raw": cat(u_raw)}
    return metrics, preds, scores


def evaluate_baselines(cfg: Config, train, dev, test) -> tuple[dict[str, dict], dict[str, np.ndarray]]:
    """Metrics of each configured baseline, and its concatenated test scores (for the ROC plot)."""
    from ..baselines import make_baseline

    ec = cfg.evaluate
    rows, scores = {}, {}
    for name in ec.baselines:
        t0 = time.perf_counter()
        b = make_baseline(name, cfg)
        b.fit(train, dev)
        temperature = None
        if dev:
            dev_scores = np.concatenate([s for s in b.score(dev)] or [np.zeros(0)])
            temperature = _temperature(np.concatenate([e.u.numpy() for e in dev]), dev_scores)
        test_scores = b.score(test)
        rows[name] = span_level_metrics(test_scores, test, ec, bootstrap=ec.bootstrap, temperature=temperature)
        rows[name]["seconds"] = round(time.perf_counter() - t0, 2)
        scores[name] = np.concatenate(test_scores) if test_scores else np.zeros(0)
    return rows, scores


def draw_examples(test: list[ResponseExample], preds: list[dict], cfg: Config, path: Path, tokenizer) -> Path | None:
    """The test answers with the most labelled spans: the probe's shown spans (the inference
    path's kept, de-duplicated, word-snapped spans) coloured by û above the labelled spans
    coloured by u* (the README picture)."""
    from ..label.targets import token_offsets, token_span_to_chars
    from ..score.views import to_png

    order = sorted(range(len(test)), key=lambda i: (-len(test[i].u), test[i].prompt_id))
    items = []
    for i in order[: cfg.evaluate.n_examples]:
        ex, p = test[i], preds[i]
        ids, offsets = token_offsets(tokenizer, ex.response)
        if ids != list(ex.token_ids):
            continue
        spans = [(*token_span_to_chars(ex.response, offsets, int(p["spans"][k, 0]), int(p["spans"][k, 1])),
                  float(p["u"][k])) for k in p["keep"]]
        labels = [(*token_span_to_chars(ex.response, offsets, b, e), float(u))
                  for (b, e), u in zip(ex.spans.tolist(), ex.u.tolist())]
        items.append((f"{ex.prompt_id} ({ex.domain}), SpanUQ probe, one forward pass: û_seq {p['u_seq']:.2f}",
                      ex.response, spans))
        items.append((f"the same answer, labels from {cfg.generate.n_samples} samples ({cfg.label.method}): "
                      f"u*_seq {ex.u_seq or 0:.2f}", ex.response, labels))
    if not items:
        return None
    to_png(items, str(path))
    return path


def run_evaluate(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: metrics.json + plots/eval/ + an MLflow run; prints the table."""
    from ..pipeline import tracking
    from ..llm.loading import load_tokenizer

    paths = StagePaths.from_config(cfg)
    torch.set_num_threads(cfg.train.num_threads or os.cpu_count() or 1)
    test = load_examples(paths.features, paths.labels, ("test",))
    dev = load_examples(paths.features, paths.labels, ("dev",))
    train = load_examples(paths.features, paths.labels, ("train",))
    if not test:
        raise ValueError(f"no labelled test responses in {paths.labels}; see the label report")
    device = resolve_device(cfg.train.device)
    model, meta = load_checkpoint(paths.probe, device)
    tokenizer = load_tokenizer(cfg)
    t0 = time.perf_counter()
    probe_metrics, preds, scores = evaluate_probe(cfg, model, test, device, tokenizer)
    probe_metrics["seconds"] = round(time.perf_counter() - t0, 2)
    baseline_rows, baseline_scores = evaluate_baselines(cfg, train, dev, test)

    rows = {"spanuq": probe_metrics, **baseline_rows}
    n_spans = int(sum(len(e.u) for e in test))
    metrics = {"backbone": cfg.backbone.name, "split": "test", "n_responses": len(test), "n_spans": n_spans,
               "probe": {"n_parameters": model.num_parameters(), **meta.get("extra", {})},
               **rows}
    write_json(paths.metrics, metrics)

    plots = paths.eval_plots
    plots.mkdir(parents=True, exist_ok=True)
    ec = cfg.evaluate
    u_all = scores["u_true"]
    curves = {"SpanUQ": (u_all, scores["u"])}
    curves.update({name: (u_all, s) for name, s in baseline_scores.items()})
    figs = [roc_plot(curves, ec.positive_threshold, plots / "roc.png")]
    if len(u_all):
        variants = {"raw û": scores["u_raw"], f"calibrated (T = {model.temperature:.2f}, fitted on dev)": scores["u"]}
        figs.append(reliability_plot(u_all, variants, ec.ece_bins, plots / "reliability.png"))
        figs.append(scatter_plot(u_all, scores["u"], plots / "scatter.png"))
    ex = draw_examples(test, preds, cfg, plots / "examples.png", tokenizer)
    if ex:
        figs.append(ex)

    with tracking.start_run(cfg, run_name=f"evaluate-{cfg.backbone.name}", tags={"stage": "evaluate"}):
        tracking.log_config(cfg)
        tracking.log_metrics(flat_metrics(rows))
        tracking.log_artifacts(str(plots), "plots")
        tracking.log_artifacts(str(paths.metrics))
    print(f"SpanUQ on {cfg.backbone.name}, test split: {len(test)} responses, {n_spans} labelled spans "
          "(span metrics over every labelled span)")
    print(format_table(rows))
    return paths.metrics


def flat_metrics(rows: dict[str, dict]) -> dict[str, float]:
    """{"spanuq.span.auroc": 0.81, ...} of every defined metric value, for MLflow."""
    out = {}
    for method, row in rows.items():
        for section in ("span", "span_matched", "detection", "sequence"):
            for k, v in (row.get(section) or {}).items():
                val = v.get("value") if isinstance(v, dict) else v
                if isinstance(val, (int, float)) and not isinstance(val, bool) and np.isfinite(val):
                    out[f"{method}.{section}.{k}"] = float(val)
    return out
