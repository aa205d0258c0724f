"""Layer probing (paper App. B.6, Tab. A5): which layers carry the uncertainty signal?

For every candidate layer l, an MLP probe is trained on mean-pooled span features
of that layer alone (oracle spans from the labels, train split, early stopping on
held-out *answers* of train, so no answer has spans on both sides) and scored by span AUROC on the dev split: choosing layers
is model selection, so the test split stays out of it.  The curve is usually an inverted U peaking in the
mid-to-late layers; pick three adjacent layers near the peak as `backbone.layers`.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config
from ..metrics.uq import metric_value, span_metrics
from ..llm.loading import load_backbone
from ..llm.presets import get_preset
from ..llm.states import teacher_forced
from ..label.sample_answers import read_answers
from ..pipeline.files import read_records, write_json
from ..pipeline.paths import StagePaths
from ..pipeline.records import Generation, LabeledResponse
from .mlp_probe import pool_span_features, predict_span_mlp, train_span_mlp


def collect_layer_features(cfg: Config, records: list[LabeledResponse], gens: dict[str, Generation],
                           layers: list[int], batch_size: int = 8, progress: bool = True) -> dict[int, np.ndarray]:
    """{layer: (n_spans, d)} mean-pooled span features, spans in record order."""
    model, tok = load_backbone(cfg)
    feats: dict[int, list[np.ndarray]] = {l: [] for l in layers}
    for s in tqdm(range(0, len(records), batch_size), desc="layer features", disable=not progress):
        batch = records[s: s + batch_size]
        chats = [gens[r.prompt_id].chat_prompt for r in batch]
        resps = [gens[r.prompt_id].greedy.token_ids for r in batch]
        for rec, (hidden, _) in zip(batch, teacher_forced(model, tok, chats, resps)):
            spans = torch.tensor([[x.tok_start, x.tok_end] for x in rec.spans], dtype=torch.long).reshape(-1, 2)
            for l in layers:
                feats[l].append(pool_span_features(hidden[l].float(), spans).numpy())
    return {l: np.concatenate(v) if v else np.zeros((0, 1)) for l, v in feats.items()}


def run_layer_probe(cfg: Config, layers: list[int] | None = None, out_dir: str | Path | None = None,
                    progress: bool = True) -> dict:
    paths = StagePaths.from_config(cfg)
    preset = get_preset(cfg.backbone.name)
    layers = layers or list(range(2, preset.n_layers + 1, 2))
    out = Path(out_dir) if out_dir else paths.root / "layer_probe"
    recs = [r for r in read_records(paths.labels, LabeledResponse) if r.status == "ok" and r.spans]
    gens = {g.prompt_id: g for g in read_answers(paths.generations, paths.labels)}
    train = [r for r in recs if r.split == "train"]
    held = [r for r in recs if r.split == "dev"]
    if not train or not held:
        raise ValueError("layer probing needs labelled train and dev responses; run `dvc repro label`")
    ftr = collect_layer_features(cfg, train, gens, layers, progress=progress)
    fte = collect_layer_features(cfg, held, gens, layers, progress=progress)
    ytr = np.array([x.u for r in train for x in r.spans])
    gtr = [r.prompt_id for r in train for _ in r.spans]  # early stopping holds out whole answers
    yte = np.array([x.u for r in held for x in r.spans])
    rows = []
    for l in tqdm(layers, desc="layer probes", disable=not progress):
        model = train_span_mlp(ftr[l], ytr, seed=cfg.train.seed, groups=gtr)
        m = span_metrics(yte, predict_span_mlp(model, fte[l]), cfg.evaluate.positive_threshold)
        rows.append({"layer": l, "auroc": metric_value(m, "auroc"), "spearman": metric_value(m, "spearman"),
                     "mae": metric_value(m, "mae"), "n_train_spans": len(ytr), "n_test_spans": len(yte)})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "layer_auroc.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    best = max((r for r in rows if r["auroc"] is not None), key=lambda r: r["auroc"], default=None)
    write_json(out / "layer_auroc.json", {"rows": rows, "best_layer": best["layer"] if best else None})
    _plot(rows, out / "layer_auroc.png", cfg.backbone.name)
    print(f"{'layer':>5}  {'AUROC':>6}  {'rho_s':>6}  {'MAE':>6}   (span-level, {len(yte)} dev spans)")
    for r in rows:
        f = lambda v: f"{v:6.3f}" if v is not None else "   n/a"  # noqa: E731
        print(f"{r['layer']:>5}  {f(r['auroc'])}  {f(r['spearman'])}  {f(r['mae'])}")
    if best:
        print(f"best single layer: {best['layer']} (AUROC {best['auroc']:.3f}); wrote {out}")
    return {"rows": rows, "best": best}


def _plot(rows: list[dict], path: Path, backbone: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["layer"] for r in rows if r["auroc"] is not None]
    ys = [r["auroc"] for r in rows if r["auroc"] is not None]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=120)
    ax.plot(xs, ys, marker="o")
    ax.set_xlabel("layer")
    ax.set_ylabel("span AUROC (MLP probe)")
    ax.set_title(f"Layer probing — {backbone}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
