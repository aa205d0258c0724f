"""Labelled answers → `AnswerClaims`: each labelled claim's û as the evaluation scores it.

A labelled claim (the teacher's span with its soft label u*) gets the û of the kept predicted
span that overlaps it most, or the answer's û_seq when no kept span overlaps it
(`spanuq.evaluate.scoring.all_span_scores`: the one scoring rule of every table), so a
threshold on û decides every claim of the answer, also those the probe drew no span over.
A claim is wrong when u* ≥ ``evaluate.positive_threshold``.

Two sources of labelled answers:

* ``shipped`` — the test split stored with a shipped probe (``test_split.jsonl``), its states
  re-extracted with the backbone (`spanuq.score.shipped.test_examples`);
* a pipeline data folder (``paths.data``): the extract stage's states and the label stage's
  labels of one split (`spanuq.features.dataset.load_examples`).
"""
from __future__ import annotations

import numpy as np

from ..features.dataset import ResponseExample, answers
from ..metrics.conformal import AnswerClaims


def claims_of(uq, examples: list[ResponseExample]) -> list[AnswerClaims]:
    """Score ``examples`` with the probe of ``uq`` (a `SpanUQ`) as `SpanUQ.score` shows them
    (its calibration, spans grown to words, long answers in windows) and give each labelled
    claim its û."""
    import torch

    from ..evaluate.scoring import all_span_scores
    from ..score.windows import predict_windows

    if not examples:
        return []
    preds = predict_windows(uq.probe, examples, uq.calibration, answers(uq.tok, examples), window=uq.window,
                            batch_size=32, device=next(uq.probe.parameters()).device)
    ec = uq.cfg.evaluate
    scores, _ = all_span_scores(preds, examples, iou_threshold=ec.iou_threshold)
    out = []
    for ex, s in zip(examples, scores):
        u_star = ex.u.numpy() if isinstance(ex.u, torch.Tensor) else np.asarray(ex.u)
        out.append(AnswerClaims(ex.prompt_id, np.asarray(s, dtype=np.float64),
                                np.asarray(u_star, dtype=np.float64) >= ec.positive_threshold, ex.domain))
    return out


def shipped_examples(uq, limit: int | None = None, progress: bool = False) -> list[ResponseExample]:
    """The labelled test answers stored with ``uq``'s probe (the first ``limit``), their states re-extracted."""
    from ..score.shipped import TEST_SPLIT, test_examples

    if not (uq.checkpoint / TEST_SPLIT).exists():
        raise FileNotFoundError(f"{uq.checkpoint} has no {TEST_SPLIT} (only a shipped probe stores its test split); "
                                "calibrate on a pipeline data folder: --data <paths.data>")
    return test_examples(uq.checkpoint, uq.model, uq.tok, uq.layers, uq.cfg.extract.dtype, limit=limit,
                         progress=progress)


def folder_examples(cfg, split: str, limit: int | None = None) -> list[ResponseExample]:
    """The labelled answers of ``split`` in the pipeline data folder of ``cfg`` (``paths.data``),
    whose stored states must be those the probe reads (``cfg.backbone``: the probe's backbone and layers)."""
    from ..features.dataset import load_examples
    from ..features.store import FEATURE_SCHEMA_VERSION
    from ..pipeline.files import read_json
    from ..pipeline.paths import StagePaths

    paths = StagePaths.from_config(cfg)
    if not paths.labels.exists() or not paths.features.exists():
        raise FileNotFoundError(f"{paths.root}: no labels and "
                                "states; run `spanuq prompts/generate/label/extract` with this paths.data first")
    meta = read_json(paths.features / "index.json")["meta"]
    want = {"backbone": cfg.backbone.name, "layers": list(cfg.backbone.layers),
            "schema_version": FEATURE_SCHEMA_VERSION}
    have = {k: meta.get(k) for k in want}
    if have != want:
        raise ValueError(f"{paths.features} holds states of {have}, the probe reads {want}: re-extract them with "
                         f"`spanuq extract -o paths.data={cfg.paths.data} -o backbone.layers="
                         f"[{','.join(map(str, want['layers']))}]` (and the preset the folder was made with)")
    out = load_examples(paths.features, paths.labels, (split,))[:limit]
    if not out:
        raise ValueError(f"no labelled {split} answers in {paths.labels}")
    return out
