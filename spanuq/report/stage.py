"""The `report` stage: metrics.json (evaluate) + baselines/ (+ ablation/, bench/ when present) →
``data/<backbone>/report/report.md`` and ``index.html``, with a ROC chart of every
method, reliability diagrams and the per-domain breakdown; logged to MLflow.  It prints
the test-split table of SpanUQ beside the floors and every baseline, as does

    python -m spanuq.report [-p params.yaml]    # the table of the last run, without running anything
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import Config
from ..pipeline.files import read_json
from ..pipeline.paths import StagePaths
from .mushroom import report_tables as mushroom_tables
from .render import write_report
from .tables import (METHODS, ablation_table, cost_table, detection_table, display_name, members_note, method_rows,
                     per_domain_table, sequence_table, span_table)


def figures(scores: dict, rows: dict, out_dir: Path, threshold: float, n_bins: int) -> list[tuple[str, Path]]:
    """ROC of every method over every labelled span and reliability diagrams."""
    from ..evaluate.plots import reliability_plot, roc_plot

    u = np.asarray(scores["u"], dtype=float)
    curves = {}
    if scores.get("spanuq"):
        curves["SpanUQ (ours)"] = (u, np.asarray(scores["spanuq"], dtype=float))
    for k, s in scores.get("methods", {}).items():
        curves[METHODS.get(k, (k,))[0]] = (u, np.asarray(s, dtype=float))
    out = [("ROC over the labelled test spans (AUROC in the legend)", roc_plot(curves, threshold, out_dir / "roc.png"))]
    if "SpanUQ (ours)" in curves:
        out.append(("Reliability: SpanUQ over every labelled span",
                    reliability_plot(u, {"SpanUQ (ours)": curves["SpanUQ (ours)"][1]}, n_bins,
                                     out_dir / "reliability_spanuq.png")))
    bounded = [k for k in scores.get("methods", {}) if rows.get(k, {}).get("bounded", True)]
    for i in range(0, len(bounded), 5):  # five lines per diagram stay readable
        part = {METHODS.get(k, (k,))[0]: np.asarray(scores["methods"][k], dtype=float) for k in bounded[i: i + 5]}
        path = reliability_plot(u, part, n_bins, out_dir / f"reliability_{i // 5}.png")
        out.append((f"Reliability over every labelled span: {', '.join(part)}", path))
    return out


def read_metrics(paths: StagePaths) -> tuple[dict, dict]:
    """(evaluate's metrics.json, the baselines stage's metrics.json); a clear error when one is missing."""
    if not paths.metrics.exists():
        raise FileNotFoundError(f"{paths.metrics} is missing: run `spanuq evaluate` (or `dvc repro`) first")
    base_file = paths.root / "baselines" / "metrics.json"
    if not base_file.exists():
        raise FileNotFoundError(f"{base_file} is missing: run `spanuq baselines` (or `dvc repro`) first")
    return read_json(paths.metrics), read_json(base_file)


def summary(evaluation: dict, baselines: dict) -> str:
    """SpanUQ beside the floors (surface prior, token entropy, MLP probe) and every baseline, one
    row each over the same labelled test spans (the evaluate and baselines stages' metrics)."""
    from ..evaluate.table import format_table

    rows = {k: v for k, v in method_rows(evaluation, baselines).items() if "span" in v}
    return (f"{evaluation.get('backbone')}, {evaluation.get('split')} split: {evaluation.get('n_responses')} responses, "
            f"{evaluation.get('n_spans')} labelled spans (span metrics over every labelled span)\n"
            f"{format_table(rows)}" + "".join(f"\n{line}" for line in members_note(evaluation.get("spanuq") or {})))


def run_report(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: report/report.md + report/index.html (+ an MLflow artifact); prints
    the table of every method."""
    paths = StagePaths.from_config(cfg)
    out_dir = paths.root / "report"
    evaluation, baselines = read_metrics(paths)
    scores = read_json(paths.root / "baselines" / "scores.json")
    rows = method_rows(evaluation, baselines)
    tables = [span_table(rows), sequence_table(rows), detection_table(evaluation, baselines),
              cost_table(rows, baselines.get("cost", {})),
              per_domain_table(scores, cfg.evaluate.positive_threshold)]
    abl = ablation_table(paths.root / "ablation")
    if abl is not None:
        tables.append(abl)
    tables += mushroom_tables(paths.root / "bench")  # `spanuq bench mushroom`, when it has run
    nli = baselines.get("nli")
    intro = [f"Backbone {cfg.backbone.name}; test split: {evaluation.get('n_responses')} answers, "
             f"{evaluation.get('n_spans')} labelled spans; labels: {baselines.get('label_method')} "
             f"(S = {baselines.get('n_samples')} samples); every method scored by the evaluate stage's code on the "
             "same spans in the same run.",
             f"NLI for the sampling methods: {nli or 'none'}." + (
                 " No NLI model is available offline: the rows marked (embedding NLI stand-in) use sentence-embedding "
                 "similarity with a key-term (numbers, names) agreement check instead of an NLI model." if nli and
                 "stand-in" in nli else ""),
             "Rows: " + "; ".join(f"{display_name(k, r)}: {METHODS.get(k, ('', 'ours'))[1]}" for k, r in rows.items())]
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = figures(scores, rows, out_dir, cfg.evaluate.positive_threshold, cfg.evaluate.ece_bins)
    md, page = write_report(out_dir, f"{cfg.report.title}: {cfg.backbone.name}", intro, tables, figs)
    if cfg.report.log_mlflow:
        from ..pipeline import tracking

        with tracking.start_run(cfg, run_name=f"report-{cfg.backbone.name}", tags={"stage": "report"}):
            tracking.log_artifacts(str(out_dir), "report")
    print(summary(evaluation, baselines))
    print(f"report: {page}")
    return page
