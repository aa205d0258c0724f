"""The with-sources calibration of the backbone's own answers (`Calibration.grounded["generated"]`),
fitted by the train stage on the dev answers the backbone wrote with sources in its input
(`Prompt.context`: a user's rows with ``context``, the grounded rows of ``prompts.grounded``).

An own answer read after its sources is another input than one read without: the probe's raw û there
has its own level and spread, and its labels mean "the source does not back this" (docs/labels.md
"Rows with sources").  So it gets a mapping of its own, of the given mapping's form without the span
term (Platt scaling on every labelled span, `fit_platt`):

    û = σ(logit(û_raw)/T + b)

and its own ``flag`` (`flag_threshold` at ``evaluate.flag_precision``).  The scorer takes it for an own
answer scored with ``context`` (`Calibration.for_source("generated", grounded=True)`); the own-answer
calibration without sources, the validity threshold and model selection read only dev answers without
sources (`split_context`).  With fewer than `MIN_SPANS` labelled spans, or one class, nothing is fitted
and the train report says why.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import Config
from ..evaluate.scoring import all_span_scores
from ..features.dataset import ResponseExample
from ..metrics.ece import fit_platt, flag_threshold
from ..model.calibration import Calibration
from ..model.postprocess import Answer, predict

MIN_SPANS = 10  # the fewest labelled dev spans with sources the mapping is fitted on


def split_context(examples: list[ResponseExample]) -> tuple[list[ResponseExample], list[ResponseExample]]:
    """(answers read without sources, answers read with them)."""
    return ([e for e in examples if not e.meta.get("context")], [e for e in examples if e.meta.get("context")])


def calibrate_generated_with_context(model, dev: list[ResponseExample], calibration: Calibration, cfg: Config,
                                     device, answer_texts: list[Answer | None] | None = None
                                     ) -> tuple[Calibration, dict]:
    """``calibration`` with ``grounded["generated"]`` fitted on ``dev`` (own dev answers read with their
    sources; module docstring), and what was fitted."""
    ec = cfg.evaluate
    preds = predict(model, dev, calibration.raw(), answer_texts, batch_size=cfg.train.batch_size, device=device)
    raw, _ = all_span_scores(preds, dev, iou_threshold=ec.iou_threshold, key="u_raw")
    y, s = np.concatenate([e.u.numpy() for e in dev]), np.concatenate(raw)
    positive = int((y >= ec.positive_threshold).sum())
    if len(y) < MIN_SPANS or positive in (0, len(y)):
        return calibration, {"used": False, "answers": len(dev), "spans": int(len(y)), "wrong": positive,
                             "reason": f"needs >= {MIN_SPANS} labelled spans of both classes"}
    t, b = fit_platt(y, s)
    mapped = Calibration(temperature=t, bias=b)
    flag, flag_info = flag_threshold(y, mapped.scores(s), ec.flag_precision, ec.positive_threshold)
    entry = {"temperature": t, "bias": b, "flag": flag}
    return (replace(calibration, grounded={**(calibration.grounded or {}), "generated": entry}),
            {"used": True, "answers": len(dev), "spans": int(len(y)), "wrong": positive, **entry,
             "flag_dev": flag_info})
