"""One scoreboard for every method: metrics over every labelled span of a split.

Every method ends up as one score per labelled span (``scores_per_example[i]``
aligned with ``examples[i].spans``) and, optionally, one sequence score per
response; `span_level_metrics` turns that into the same table row for SpanUQ,
the baselines and the surface prior alike.

A method that finds its own spans (SpanUQ, heuristic detectors) scores a
labelled span g by `all_span_scores` (DESIGN.md "Scoring rules"):

    û(g) = û of the kept prediction with the highest token IoU with g   (IoU > 0)
         = û_seq of the answer                                           (no kept prediction overlaps g)

so a method cannot raise its numbers by finding fewer, easier spans.  The
figures over matched pairs only (IoU ≥ 0.3, one-to-one), the share of labelled
spans matched (coverage) and detection P/R/F1 are kept as secondary columns.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..model.postprocess import Prediction
from .detection import counts_detection, match_spans, token_iou_matrix
from ..metrics.uq import defined, sequence_metrics, span_metrics, to_numpy, undefined


def example_u_seq(example) -> float | None:
    """Ground-truth sequence uncertainty: ``example.u_seq``, else the mean span u*, else None."""
    if example.u_seq is not None:
        return float(example.u_seq)
    u = to_numpy(example.u).ravel()
    return float(u.mean()) if u.size else None


def kept(pred: Prediction, validity_threshold: float | None = None) -> np.ndarray:
    """Indices of the shown queries: ``pred.keep`` (the post-processing's choice), or all with
    validity ≥ ``validity_threshold`` when one is given."""
    if validity_threshold is None:
        return np.asarray(pred.keep, dtype=np.int64)
    return np.flatnonzero(to_numpy(pred.validity).ravel() >= validity_threshold)


def _check_aligned(preds: list[Prediction], examples: list) -> None:
    if len(preds) != len(examples):
        raise ValueError(f"{len(preds)} predictions for {len(examples)} examples")
    for p, e in zip(preds, examples):
        if p.prompt_id != e.prompt_id:
            raise ValueError(f"prediction for {p.prompt_id!r} is aligned with example {e.prompt_id!r}")


def all_span_scores(preds: list[Prediction], examples: list, validity_threshold: float | None = None,
                    iou_threshold: float = 0.3, key: str = "u") -> tuple[list[np.ndarray], Counter]:
    """û of every labelled span by the rule in the module docstring, and where each came
    from: ``detected`` (best-overlapping kept prediction has IoU ≥ ``iou_threshold``),
    ``overlap`` (0 < IoU < threshold) or ``sequence`` (no overlap: û_seq).  ``key``
    picks ``u`` (calibrated) or ``u_raw``."""
    _check_aligned(preds, examples)
    out, source = [], Counter()
    for pred, ex in zip(preds, examples):
        gt = to_numpy(ex.spans, np.int64).reshape(-1, 2)
        k = kept(pred, validity_threshold)
        spans = to_numpy(pred.spans, np.int64).reshape(-1, 2)[k]
        raw = key == "u_raw" and pred.u_raw is not None
        u = to_numpy(pred.u_raw if raw else pred.u).ravel()[k]
        fallback = float(pred.u_seq_raw if raw and pred.u_seq_raw is not None else pred.u_seq)
        scores = np.full(len(gt), fallback, dtype=np.float64)
        if len(gt) and len(spans):
            iou = token_iou_matrix(spans, gt)  # (P, G)
            validity = to_numpy(pred.validity).ravel()[k]
            for g in range(len(gt)):
                best = np.lexsort((-validity, -iou[:, g]))[0]  # highest IoU, then highest validity
                if iou[best, g] > 0:
                    scores[g] = u[best]
                    source["detected" if iou[best, g] >= iou_threshold else "overlap"] += 1
                else:
                    source["sequence"] += 1
        else:
            source["sequence"] += len(gt)
        out.append(scores)
    return out, source


def span_level_metrics(scores_per_example: list, examples: list, cfg, bootstrap: int = 0,
                       temperature: float | None = None, seq_scores: list[float | None] | None = None,
                       raw_scores_per_example: list | None = None) -> dict:
    """The table row of any method from one score per labelled span.

    Span metrics over every labelled span of ``examples`` (clustered by prompt id,
    with within-answer pair accuracy); sequence metrics of ``seq_scores`` (one per
    example; default: the mean of the example's span scores, skipped when it has
    none).  ``temperature`` adds ECE after a dev-fitted temperature;
    ``raw_scores_per_example`` (of a method whose scores are already calibrated)
    adds ``ece_raw``.  Returns ``{"n_responses", "span", "sequence"}``.
    """
    if len(scores_per_example) != len(examples):
        raise ValueError(f"{len(scores_per_example)} score arrays for {len(examples)} examples")
    ut, up, raw, grp = [], [], [], []
    default_seq = []
    for i, (sc, ex) in enumerate(zip(scores_per_example, examples)):
        sc, u_star = to_numpy(sc).ravel(), to_numpy(ex.u).ravel()
        if sc.shape != u_star.shape:
            raise ValueError(f"{ex.prompt_id}: {sc.size} scores for {u_star.size} ground-truth spans")
        ut.append(u_star)
        up.append(sc)
        if raw_scores_per_example is not None:
            raw.append(to_numpy(raw_scores_per_example[i]).ravel())
        grp += [ex.prompt_id] * len(sc)
        default_seq.append(float(sc.mean()) if sc.size else None)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    ec = cfg
    span = span_metrics(cat(ut), cat(up), ec.positive_threshold, ec.ece_bins, temperature, bootstrap, grp,
                        ec.seed, pair_gap=ec.pair_gap, u_raw=cat(raw) if raw_scores_per_example is not None else None)
    sequence = _sequence_from(examples, seq_scores if seq_scores is not None else default_seq, cfg, bootstrap)
    return {"n_responses": len(examples), "span": span, "sequence": sequence}


# the paper's name for a baseline scored on the labelled spans themselves
oracle_span_metrics = span_level_metrics


def matched_pairs(preds: list[Prediction], examples: list, cfg, validity_threshold: float | None = None) -> dict:
    """One-to-one matching (IoU ≥ cfg.iou_threshold) of each response's kept predictions to its
    labelled spans: ``u_true``, ``u_pred``, ``groups`` over matched pairs, the matched ``ious``
    and per-response ``matched``, ``n_pred``, ``n_gt`` counts (detection)."""
    _check_aligned(preds, examples)
    ut, up, grp, ious, m, p, g = [], [], [], [], [], [], []
    for pred, ex in zip(preds, examples):
        k = kept(pred, validity_threshold)
        spans = to_numpy(pred.spans, np.int64).reshape(-1, 2)[k]
        u = to_numpy(pred.u).ravel()[k]
        gt, u_star = to_numpy(ex.spans, np.int64).reshape(-1, 2), to_numpy(ex.u).ravel()
        pairs = match_spans(spans, gt, cfg.iou_threshold)
        for pi, gi, iou in pairs:
            ut.append(u_star[gi])
            up.append(u[pi])
            grp.append(ex.prompt_id)
            ious.append(iou)
        m.append(len(pairs))
        p.append(len(spans))
        g.append(len(gt))
    return {"u_true": np.array(ut, dtype=np.float64), "u_pred": np.array(up, dtype=np.float64),
            "groups": grp, "ious": ious, "matched": np.array(m, dtype=np.int64),
            "n_pred": np.array(p, dtype=np.int64), "n_gt": np.array(g, dtype=np.int64)}


def _sequence_from(examples: list, seq_preds: list[float | None], cfg, bootstrap: int) -> dict:
    yt, yp = [], []
    for ex, s in zip(examples, seq_preds):
        t = example_u_seq(ex)
        if t is None or s is None:
            continue
        yt.append(t)
        yp.append(float(s))
    return sequence_metrics(yt, yp, cfg.seq_positive_threshold, bootstrap, cfg.seed)


def evaluate_predictions(preds: list[Prediction], examples: list, cfg, bootstrap: int = 0,
                         temperature: float | None = None, validity_threshold: float | None = None) -> dict:
    """Every metric of a span-finding method's predictions (`spanuq.model.postprocess.predict`).

    ``span``: over every labelled span (`all_span_scores`; ``ece_raw`` beside ``ece``
    when the predictions carry ``u_raw``); ``span_matched``: over matched pairs only;
    ``detection``: P/R/F1 and mean IoU of the kept predictions (responses without
    labelled spans count their predictions as false positives); ``coverage``: matched
    labelled spans / all; ``span_sources``: how many labelled spans were scored by a
    detected prediction, a weakly overlapping one, or û_seq; ``sequence``: û_seq.
    ``validity_threshold`` overrides the predictions' own ``keep``.
    """
    scores, sources = all_span_scores(preds, examples, validity_threshold, cfg.iou_threshold)
    raw = None
    if all(p.u_raw is not None for p in preds):
        raw, _ = all_span_scores(preds, examples, validity_threshold, cfg.iou_threshold, key="u_raw")
    row = span_level_metrics(scores, examples, cfg, bootstrap, temperature,
                             seq_scores=[p.u_seq for p in preds], raw_scores_per_example=raw)
    r = matched_pairs(preds, examples, cfg, validity_threshold)
    matched = span_metrics(r["u_true"], r["u_pred"], cfg.positive_threshold, cfg.ece_bins, None, bootstrap,
                           r["groups"], cfg.seed, pair_gap=cfg.pair_gap)
    detection = counts_detection(r["matched"], r["n_pred"], r["n_gt"], r["ious"], bootstrap, cfg.seed)
    detection["iou_threshold"] = float(cfg.iou_threshold)
    thresholds = {float(p.threshold) for p in preds if p.threshold is not None}
    detection["validity_threshold"] = (validity_threshold if validity_threshold is not None
                                       else thresholds.pop() if len(thresholds) == 1 else None)
    n_gt = int(r["n_gt"].sum())
    coverage = defined(r["matched"].sum() / n_gt) if n_gt else undefined("no ground-truth spans")
    return {"n_responses": len(examples), "span": row["span"], "span_matched": matched, "detection": detection,
            "coverage": coverage, "span_sources": dict(sources), "sequence": row["sequence"]}
