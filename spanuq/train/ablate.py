"""`spanuq ablate`: the paper's ablation table (Tab. 4 layout) on one split, in one run.

Every row of params.yaml ``ablate.rows`` is a name plus dotted overrides of the
config (``{"probe.ucir": false}``, `spanuq.config.apply_overrides`); each is trained with
`spanuq.train.loop.train_probe` on the same train/dev split and scored on the same test split
with `spanuq.train.loop.evaluate_model` (the metrics of the evaluate stage), so the rows differ only by their switches.
``ablate.warmup_epochs`` / ``joint_epochs`` shorten every row alike.

Writes ``data/<backbone>/ablation/ablation.json`` (every row's metrics and config
overrides) and ``ablation.md`` (AUROC over every labelled span the metrics cover,
MAE, ρ_s, detection P/R/F1, coverage, mean matched IoU, train time).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..config import Config, apply_overrides
from ..metrics.uq import metric_value
from ..evaluate.table import ABLATION_COLUMNS
from ..features.dataset import answers, load_examples, training_examples
from ..llm.loading import load_tokenizer, resolve_device
from ..pipeline.files import read_json, write_json
from ..pipeline.paths import StagePaths

log = logging.getLogger(__name__)



def format_markdown(rows: list[dict], meta: dict) -> str:
    head = ["row", *[c for c, _ in ABLATION_COLUMNS], "train s", "epochs"]
    lines = [f"# Ablation ({meta['backbone']}: {meta['n_train']} train / {meta['n_dev']} dev / "
             f"{meta['n_test']} test answers, {meta['n_test_spans']} labelled test spans)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["name"]] + [("n/a" if r["values"][c] is None else f"{r['values'][c]:.3f}")
                               for c, _ in ABLATION_COLUMNS]
        cells += [f"{r['train_seconds']:.0f}", str(r["epochs_run"])]
        lines.append("| " + " | ".join(cells) + " |")
    thr = ", ".join(f"{r['name']} {r['validity_threshold']:g}" for r in rows if "validity_threshold" in r)
    lines += ["", f"Every row is trained on the same split, calibrated on dev as the train stage does and "
              f"scored as the evaluate stage does: AUROC / MAE / ρ_s over every labelled test span (a span "
              f"no kept prediction overlaps gets the answer's û_seq); detection at IoU ≥ {meta['iou_threshold']} "
              f"with each row's dev-chosen validity threshold ({thr}).", ""]
    return "\n".join(lines)


def ablate_rows(cfg: Config, rows, train: list, dev: list, test: list, progress: bool = True,
                on_row=None, done: list[dict] | None = None, tokenizer=None) -> list[dict]:
    """Train every row on ``train``/``dev``, calibrate it on dev as the train stage does (validity
    threshold for F1, guarded temperature) and score it on ``test`` as the evaluate stage does
    (word-snapped spans with ``tokenizer``); one result dict per row.  Rows found in ``done``
    with the same overrides are kept, not retrained (a resumed run)."""
    from .loop import evaluate_model, train_probe
    from .stage import calibrate_on_dev

    key = lambda name, overrides: (name, repr(sorted(overrides.items())))  # noqa: E731
    dev_answers, test_answers = answers(tokenizer, dev), answers(tokenizer, test)  # one tokenisation each
    finished = {key(r["name"], r["set"]): r for r in done or []}
    results = []
    for row in tqdm(rows, desc="ablate", unit="row", disable=not progress):
        if (prev := finished.get(key(row.name, row.set))) is not None:
            results.append(prev)
            continue
        epochs = {f"train.{k}": v for k in ("warmup_epochs", "joint_epochs")
                  if (v := getattr(cfg.ablate, k)) is not None}
        rcfg = apply_overrides(cfg, {**epochs, **row.set})
        device = resolve_device(rcfg.train.device)
        t0 = time.perf_counter()
        model, info = train_probe(rcfg, train, dev, progress=False)
        seconds = time.perf_counter() - t0
        calibration, calib = calibrate_on_dev(model, dev, rcfg, device, dev_answers)
        metrics = evaluate_model(model, test, rcfg, device, calibration, test_answers)
        values = {c: metric_value(metrics, *path) for c, path in ABLATION_COLUMNS}
        results.append({"name": row.name, "set": row.set, "values": values, "train_seconds": round(seconds, 1),
                        "seconds_per_epoch": round(seconds / max(1, info["epochs_run"]), 3),
                        "epochs_run": info["epochs_run"], "best_epoch": info["best_epoch"],
                        "n_parameters": info["n_parameters"], "validity_threshold": calib["validity_threshold"],
                        "temperature": calib["temperature"], "metrics": metrics})
        log.info("ablate %s: %s (%.0f s)", row.name, values, seconds)
        if on_row:
            on_row(results)
    return results


def run_ablation(cfg: Config, progress: bool = True, out_dir: str | Path | None = None,
                 only: list[str] | None = None) -> Path:
    """Train and evaluate every ``ablate.rows`` entry (or those named in ``only``); returns the folder."""
    rows = [r for r in cfg.ablate.rows if not only or r.name in only]
    if not rows:
        raise ValueError("no ablation rows: set `ablate.rows` in params.yaml" +
                         (f" (none named {only})" if only else ""))
    paths = StagePaths.from_config(cfg)
    train, _ = training_examples(paths.features, paths.labels, cfg.train.given_kinds)
    dev = load_examples(paths.features, paths.labels, ("dev",))
    test = load_examples(paths.features, paths.labels, ("test",))
    if not train or not test:
        raise ValueError(f"need train and test examples in {paths.labels}; run the pipeline up to `extract`")
    out = Path(out_dir) if out_dir else paths.root / "ablation"
    out.mkdir(parents=True, exist_ok=True)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    meta = {"backbone": cfg.backbone.name, "n_train": len(train), "n_dev": len(dev), "n_test": len(test),
            "n_test_spans": int(sum(len(e.u) for e in test)), "iou_threshold": cfg.evaluate.iou_threshold,
            "epochs": [cfg.ablate.warmup_epochs or cfg.train.warmup_epochs, cfg.ablate.joint_epochs or cfg.train.joint_epochs],
            "test_ids": sorted(e.prompt_id for e in test)}
    # written after every row, so a killed run keeps the rows it finished and a re-run resumes
    done = []
    if (out / "ablation.json").exists():
        prev = read_json(out / "ablation.json")
        if prev.get("meta") == meta:
            done = prev.get("rows", [])
    results = ablate_rows(cfg, rows, train, dev, test, progress, done=done, tokenizer=load_tokenizer(cfg),
                          on_row=lambda res: write_json(out / "ablation.json", {"meta": meta, "rows": res}))
    (out / "ablation.md").write_text(format_markdown(results, meta))
    return out
