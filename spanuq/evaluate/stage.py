"""The `evaluate` stage: the trained probe on the test split, shown as the product shows it.

The checkpoint's predictions (its dev-fitted validity threshold and temperature,
duplicates suppressed, spans grown to words: `spanuq.model.postprocess`) are scored over
**every** labelled test span (`scoring`): AUROC with within-answer pair accuracy, MAE,
ρ_s, ECE of the calibrated scores beside the raw ECE, the matched-pairs figures and
coverage as secondary columns, detection P/R/F1 and sequence metrics of û_seq.

The floors (the surface prior, token entropy, the oracle-span MLP probe) and every other
reference method are the baselines stage's; the report stage joins both into one table
(also ``python -m spanuq.report``).

Writes ``metrics.json`` (DVC metrics; every number JSON-safe, undefined metrics say why),
``plots/eval/`` (reliability, u* vs û, scored example answers) and logs it all to MLflow.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from ..config import Config
from ..features.dataset import ResponseExample, answers, load_examples
from ..llm.loading import resolve_device
from ..model.calibration import Calibration
from ..model.checkpoint import load_checkpoint
from ..model.ensemble import ProbeEnsemble
from ..model.postprocess import Answer, Prediction, token_span_to_chars
from ..pipeline.cpus import available_cpus
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from ..metrics.uq import metric_value
from ..score.windows import predict_windows, window_length
from .plots import reliability_plot, scatter_plot
from .scoring import all_span_scores, evaluate_predictions

log = logging.getLogger(__name__)


def evaluate_probe(cfg: Config, probe, calibration: Calibration, test: list[ResponseExample], device,
                   test_answers: list[Answer | None] | None = None, *, window: int
                   ) -> tuple[dict, list[Prediction], dict]:
    """(metrics, test predictions, all-span test scores {"u_true", "u", "u_raw"}) of the probe
    shown as the product shows it: its calibration, spans grown to words (``test_answers``), answers
    longer than ``window`` tokens (the probe's trained length, `window_length`) read in windows."""
    ec = cfg.evaluate
    # as `SpanUQ.score` reads them: an answer longer than the trained length in windows (score/windows.py)
    preds = predict_windows(probe, test, calibration, test_answers, window=window, batch_size=cfg.train.batch_size,
                            device=device)
    metrics = evaluate_predictions(preds, test, ec, bootstrap=ec.bootstrap)
    u, _ = all_span_scores(preds, test, iou_threshold=ec.iou_threshold)
    u_raw, _ = all_span_scores(preds, test, iou_threshold=ec.iou_threshold, key="u_raw")
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    scores = {"u_true": cat([e.u.numpy() for e in test]), "u": cat(u), "u_raw": cat(u_raw)}
    return metrics, preds, scores


def draw_examples(test: list[ResponseExample], preds: list[Prediction], test_answers: list[Answer | None],
                  cfg: Config, path: Path) -> Path | None:
    """The test answers with the most labelled spans: the probe's shown spans (kept,
    de-duplicated, grown to words: what `spanuq score` shows) coloured by û above the labelled
    spans coloured by u* (the README picture)."""
    from ..score.views import to_png

    order = sorted(range(len(test)), key=lambda i: (-len(test[i].u), test[i].prompt_id))
    items = []
    for i in order[: cfg.evaluate.n_examples]:
        ex, p, answer = test[i], preds[i], test_answers[i]
        if answer is None:
            continue
        spans = [(s.start, s.end, s.u) for s in p.shown()]
        labels = [(*token_span_to_chars(answer.text, answer.offsets, b, e), float(u))
                  for (b, e), u in zip(ex.spans.tolist(), ex.u.tolist())]
        items.append((f"{ex.prompt_id} ({ex.domain}), SpanUQ probe, one forward pass: û_seq {p.u_seq:.2f}",
                      ex.response, spans))
        items.append((f"the same answer, labels from {cfg.generate.n_samples} samples ({cfg.label.method}): "
                      f"u*_seq {ex.u_seq or 0:.2f}", ex.response, labels))
    if not items:
        return None
    to_png(items, str(path))
    return path


def run_evaluate(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: metrics.json + plots/eval/ + an MLflow run."""
    from ..llm.loading import load_tokenizer
    from ..pipeline import tracking

    paths = StagePaths.from_config(cfg)
    torch.set_num_threads(cfg.train.num_threads or available_cpus())
    test = load_examples(paths.features, paths.labels, ("test",))
    # the probe: this run's, or the one of ``evaluate.probe_from`` (a run on other prompts)
    fit = StagePaths.fitted_on(cfg)
    if not test:
        raise ValueError(f"no labelled test responses in {paths.labels}; see the label report")
    device = resolve_device(cfg.train.device)
    ckpt = load_checkpoint(fit.probe, device)
    test_answers = answers(load_tokenizer(cfg), test)
    window = window_length(ckpt.extra, cfg.generate.max_new_tokens)
    t0 = time.perf_counter()
    probe_metrics, preds, scores = evaluate_probe(cfg, ckpt.probe, ckpt.calibration, test, device, test_answers,
                                                  window=window)
    write_json(paths.run_log("evaluate"), {"seconds": round(time.perf_counter() - t0, 2)})

    rows = {"spanuq": probe_metrics}
    n_spans = int(sum(len(e.u) for e in test))
    if isinstance(ckpt.probe, ProbeEnsemble):  # each member alone on the same spans: what one probe would have read
        probe_metrics["members_alone"] = {"seeds": ckpt.extra.get("member_seeds"), "span_auroc": [
            metric_value(evaluate_probe(cfg, m, ckpt.calibration, test, device, test_answers, window=window)[0],
                         "span", "auroc") for m in ckpt.probe.members]}
    metrics = {"backbone": cfg.backbone.name, "split": "test", "n_responses": len(test), "n_spans": n_spans,
               "probe": {"n_parameters": ckpt.probe.num_parameters(), "from": str(fit.probe), **ckpt.extra,
                         **ckpt.calibration.as_dict()},
               **rows}
    write_json(paths.metrics, metrics)

    plots = paths.eval_plots
    plots.mkdir(parents=True, exist_ok=True)
    ec = cfg.evaluate
    u_all = scores["u_true"]
    if len(u_all):  # (the ROC of SpanUQ beside the floors and every baseline is the report stage's)
        variants = {"raw û": scores["u_raw"],
                    f"calibrated (T = {ckpt.calibration.temperature:.2f}, fitted on dev)": scores["u"]}
        reliability_plot(u_all, variants, ec.ece_bins, plots / "reliability.png")
        scatter_plot(u_all, scores["u"], plots / "scatter.png")
    draw_examples(test, preds, test_answers, cfg, plots / "examples.png")

    with tracking.start_run(cfg, run_name=f"evaluate-{cfg.backbone.name}", tags={"stage": "evaluate"}):
        tracking.log_config(cfg)
        tracking.log_metrics(flat_metrics(rows))
        tracking.log_artifacts(str(plots), "plots")
        tracking.log_artifacts(str(paths.metrics))
    auroc = metric_value(probe_metrics, "span", "auroc")
    print(f"SpanUQ on {cfg.backbone.name}, test split: {len(test)} responses, {n_spans} labelled spans: span AUROC "
          f"{'n/a' if auroc is None else f'{auroc:.3f}'} over every labelled span ({paths.metrics}); the table beside "
          "the floors and the baselines is the report stage's (python -m spanuq.report)")
    return paths.metrics


def flat_metrics(rows: dict[str, dict]) -> dict[str, float]:
    """{"spanuq.span.auroc": 0.81, ...} of every defined metric value, for MLflow."""
    out = {}
    for method, row in rows.items():
        for section in ("span", "span_matched", "detection", "sequence"):
            for k, v in (row.get(section) or {}).items():
                val = metric_value(v)
                if isinstance(val, (int, float)) and not isinstance(val, bool):
                    out[f"{method}.{section}.{k}"] = float(val)
    return out
