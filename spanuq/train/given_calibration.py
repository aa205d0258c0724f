"""The given-answer calibration (`Calibration.given`): û's mapping, "likely wrong" threshold, refine
margin and subject-unknown threshold for answers the backbone did not write, fitted on the dev
split's given answers (`spanuq.label.given`).

* **mapping** û_given = σ(logit(û)/T + b + w·S − v·H₀) (`spanuq.model.calibration`), fitted on the dev
  swaps' **slots**: the one fact of each answer another writer put there (a wrong value or the
  reference), whose label the reference decides. The other spans of a swapped answer are the
  backbone's own greedy words, labelled by its re-samples: they say how the backbone reads its own
  text, not how it reads someone else's. With fewer than `MIN_SLOTS` slots of both classes
  (templated answers only, say), T and b on every given span instead;
* **flag**: the lowest û_given at which flagged spans are wrong `evaluate.flag_precision` of the time;
* **margin** (`pair_margin`): how much lower a replacement's û must be before `refine` trusts it,
  from pairs of dev answers that differ in one fact — templated twins, and each swap beside the
  backbone's own answer it was made from. The second kind is what refine compares: the backbone's
  own words against someone else's, on the same mapping;
* **unknown_entropy**: the entropy above which the backbone does not know the subject;
* **fact_spans** (``evaluate.fact_spans``): show each name, date and number of a given answer as a
  span of its own (`spanuq.score.facts`); the mapping is fitted on labelled slots, which are facts.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import Config
from ..evaluate.scoring import all_span_scores
from ..features.dataset import ResponseExample
from ..label.answer_ids import is_given, parent_id
from ..metrics.ece import fit_platt, fit_platt_surprisal, flag_threshold, pair_margin
from ..metrics.uq import to_numpy
from ..model.calibration import Calibration, span_surprisal
from ..model.postprocess import Answer, predict
from ..model.unknown import fit_unknown_threshold, knowledge_entropy

# the fewest dev slots (of both classes) the mapping is fitted on with the span term
MIN_SLOTS = 20


def calibrate_given(model, given: list[ResponseExample], calibration: Calibration, cfg: Config, device,
                    answer_texts: list[Answer | None] | None = None,
                    own: list[ResponseExample] | None = None) -> tuple[Calibration, dict]:
    """``calibration`` with its ``given`` entry fitted (module docstring) on the dev given answers,
    scored with the spans the own-answer calibration shows; ``own``: the dev split's own answers,
    the other half of the swap pairs the refine margin is chosen on. Returns it and what was fitted."""
    ec = cfg.evaluate
    preds = predict(model, given, calibration.raw(), answer_texts, batch_size=cfg.train.batch_size, device=device)
    raw, _ = all_span_scores(preds, given, iou_threshold=ec.iou_threshold, key="u_raw")
    slot = [(k, e.meta["slot"]) for k, e in enumerate(given) if "slot" in e.meta and e.surprisal is not None]
    y_slot = np.array([float(given[k].u[j]) for k, j in slot])
    n_wrong = int((y_slot >= ec.positive_threshold).sum())
    if len(slot) >= MIN_SLOTS and 0 < n_wrong < len(slot):
        s = np.array([raw[k][j] for k, j in slot])
        sh = np.array([span_terms(given[k])[j] for k, j in slot])
        t, b, w, v = fit_platt_surprisal(y_slot, s, sh)
        y, fitted_on = y_slot, {"fitted_on": "slots", "slots": len(slot)}
    else:
        y, s, sh = np.concatenate([e.u.numpy() for e in given]), np.concatenate(raw), None
        if len(y) < 2 or np.ptp(y) == 0:
            return calibration, {"used": False, "reason": "too few or one-class given dev spans"}
        (t, b), w, v = fit_platt(y, s), 0.0, 0.0
        fitted_on = {"fitted_on": "spans", "spans": int(len(y))}
    mapped = replace(calibration, temperature=t, bias=b, surprisal=w, context=v, given=None)
    flag, flag_info = flag_threshold(y, mapped.scores(s, sh), ec.flag_precision, ec.positive_threshold)
    fitted = {"temperature": t, "bias": b, "flag": flag, **({"surprisal": w, "context": v} if w or v else {}),
              **({"fact_spans": True} if ec.fact_spans else {})}
    scores = [mapped.scores(x, span_terms(e) if mapped.reads_surprisal else None) for e, x in zip(given, raw)]
    pairs = slot_pairs(given, scores)
    if own:
        pairs += swap_pairs(given, scores, own, own_scores(model, own, calibration, mapped, cfg, device))
    margin_info = None
    if pairs:
        fitted["margin"], margin_info = pair_margin(*zip(*pairs), confidence=ec.flag_precision)
    tau, unknown_info = unknown_threshold(preds, given, ec.flag_precision)
    if tau is not None:
        fitted["unknown_entropy"] = tau
    return (replace(calibration, given=fitted),
            {"used": True, "answers": len(given), **fitted_on, **fitted, "flag_dev": flag_info,
             "margin_dev": margin_info, "unknown_dev": unknown_info})


def span_terms(e: ResponseExample) -> np.ndarray:
    """(S, H₀) of each labelled span of an answer (0 where it has no stored surprisal)."""
    if e.surprisal is None:
        return np.zeros((len(e.u), 2))
    return span_surprisal(e.surprisal, e.entropy, e.spans.numpy())


def own_scores(model, own: list[ResponseExample], calibration: Calibration, mapped: Calibration, cfg: Config,
               device) -> list[np.ndarray]:
    """û_given of every labelled span of the backbone's own dev answers, read as given answers (as
    refine reads a regenerated sentence inside a given answer)."""
    preds = predict(model, own, calibration.raw(), None, batch_size=cfg.train.batch_size, device=device)
    raw, _ = all_span_scores(preds, own, iou_threshold=cfg.evaluate.iou_threshold, key="u_raw")
    return [mapped.scores(x, span_terms(e) if mapped.reads_surprisal else None) for e, x in zip(own, raw)]


def swap_pairs(given: list[ResponseExample], given_scores: list[np.ndarray], own: list[ResponseExample],
               own_scores_: list[np.ndarray]) -> list[tuple[float, float]]:
    """(û of the right slot, û of the wrong slot) of each swapped dev answer and the own answer it
    was made from: the own answer's slot is its narrowest labelled span over the swapped slot's first
    token (the text before it is the same). A swap to a wrong value (u* = 1) means the own answer was right."""
    by_id = {e.prompt_id: (e, s) for e, s in zip(own, own_scores_)}
    out = []
    for e, s in zip(given, given_scores):
        if not e.prompt_id.endswith("@given-swap") or "slot" not in e.meta or parent_id(e.prompt_id) not in by_id:
            continue
        j = e.meta["slot"]
        p, ps = by_id[parent_id(e.prompt_id)]
        spans, first = p.spans.numpy().reshape(-1, 2), int(e.spans[j, 0])
        k = np.flatnonzero((spans[:, 0] <= first) & (first <= spans[:, 1]))
        if not len(k):
            continue
        k = k[np.argmin(spans[k, 1] - spans[k, 0])]  # the narrowest of the own spans over that token
        swap_u, own_u = float(s[j]), float(ps[k])
        out.append((own_u, swap_u) if float(e.u[j]) >= 0.5 else (swap_u, own_u))
    return out


def slot_pairs(given: list[ResponseExample], scores: list[np.ndarray]) -> list[tuple[float, float]]:
    """(û of the right slot, û of the wrong slot) of each templated twin pair of the given dev answers
    (``<prompt>@given-t<k>r`` / ``t<k>w``), from per-answer span scores aligned with ``given``."""
    slot = {e.prompt_id: float(s[e.meta["slot"]]) for e, s in zip(given, scores) if "slot" in e.meta}
    return [(slot[k], slot[k[:-1] + "w"]) for k in slot if k.endswith("r") and "@given-t" in k and k[:-1] + "w" in slot]


def unknown_threshold(preds, given: list[ResponseExample], precision: float) -> tuple[float | None, dict]:
    """The entropy above which a given answer is about a subject the backbone does not know
    (`spanuq.model.unknown`), fitted on the dev given answers whose question the backbone answered
    itself: its swapped answer planted a wrong value (it was right: it knew) or put in the
    reference (it was wrong: it did not)."""
    knew = {parent_id(e.prompt_id): bool(e.u[e.meta["slot"]] >= 1.0) for e in given
            if e.prompt_id.endswith("@given-swap") and "slot" in e.meta}
    stats, labels = [], []
    for p, e in zip(preds, given):
        if not is_given(e.prompt_id) or parent_id(e.prompt_id) not in knew:
            continue
        spans = to_numpy(p.spans, np.int64).reshape(-1, 2)[np.asarray(p.keep, dtype=np.int64)]
        stat = knowledge_entropy(e.entropy.numpy(), [tuple(x) for x in spans])
        if stat is not None:
            stats.append(stat)
            labels.append(knew[parent_id(e.prompt_id)])
    return fit_unknown_threshold(stats, labels, precision)
