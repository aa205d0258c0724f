"""Step 3 of `SpanUQ.score_many` and the record it ends in: the probe over every answer, then one `ScoreResult`.

`predict_all` runs the probe over the answers' states (windows of its trained length for longer ones), through
the one post-processing step every consumer uses (`spanuq.model.postprocess`), each answer's û mapped by the
calibration of its source (`Calibration.for_source`), a given answer's names, dates and numbers shown on their
own where that calibration says so (`spanuq.score.facts`).  `assemble` makes the record of one answer: its spans,
its status (`spanuq.score.status`: scored or unverified, and why) and, under a conformal threshold
(``score.conformal_alpha``), what that threshold keeps (`spanuq.score.guarantee`).
"""
from __future__ import annotations

import time

from ..model.postprocess import Prediction
from ..model.unknown import knowledge_entropy
from . import grounded
from .answer_score import with_given_u_seq
from .facts import show_facts
from .reading import Pending
from .schema import ConformalDecision, ScoredSpan, ScoreResult, Timings
from .status import StatusCheck, assess, status_of
from .windows import plan_windows, predict_readable, readable


def predict_all(uq, items: list[Pending]) -> tuple[list[tuple[Prediction | None, list]], float]:
    """The probe over every answer (windows of a long one; a window whose states are not finite is left out,
    `predict_readable`), each answer's û mapped by the calibration of its source (the backbone's own answer or a
    given one, `Calibration.for_source`; a given answer's û_seq from its spans, `spanuq.score.answer_score`);
    returns (prediction or None, the windows left out) per answer and each item's share of the time."""
    t0 = time.perf_counter()
    preds: list = [None] * len(items)
    for source, with_context in sorted({(it.source, it.passages is not None) for it in items}):
        idx = [k for k, it in enumerate(items) if (it.source, it.passages is not None) == (source, with_context)]
        cal = uq.calibration.for_source(source, grounded=with_context)
        out = predict_readable(uq.probe, [items[k].states for k in idx], cal,
                               [items[k].readable_answer() for k in idx], window=uq.window,
                               batch_size=max(32, len(idx)), device=next(uq.probe.parameters()).device)
        given = source == "given" and uq.calibration.given is not None
        for k, (p, failed) in zip(idx, out):
            p = _facts(uq, items[k], p, cal)
            preds[k] = (with_given_u_seq(p) if given else p, failed)  # a given answer's score: its spans'
    return preds, (time.perf_counter() - t0) / len(items)


def _facts(uq, item: Pending, pred: Prediction | None, cal) -> Prediction | None:
    """``pred`` with each name, date and number of the answer shown as a span of its own, when the
    calibration of the answer's source says so (`spanuq.score.facts`: given answers)."""
    if pred is None or not cal.fact_spans:
        return pred
    st = item.states
    item.probe_spans = [(s.b, s.e) for s in pred.shown()]  # what the subject-unknown threshold was fitted on
    return show_facts(pred, item.readable_answer(), None if st.surprisal is None else st.surprisal.float().numpy(),
                      st.entropy.float().numpy(), cal, uq.cfg.label.spacy_model,
                      None if st.lookback is None else st.lookback.float().numpy())


def _knowledge(uq, item: Pending, spans: list[ScoredSpan]) -> dict:
    """What the ``subject_unknown`` rule reads of a given answer: the backbone's entropy before the
    spans the probe showed (before facts were split out of them, as the threshold was fitted) and
    the probe's threshold for it (`spanuq.model.unknown`); nothing for its own answers."""
    tau = (uq.calibration.given or {}).get("unknown_entropy")
    if item.passages is not None:  # read with sources: the backbone need not know the subject
        return {"calibration": uq.calibration.fitted_for(item.source, grounded=True)}
    if item.source != "given" or tau is None or item.states is None:
        return {}
    shown = item.probe_spans if item.probe_spans is not None else [(s.b, s.e) for s in spans]
    return {"knowledge_entropy": knowledge_entropy(item.states.entropy.float().numpy(), shown),
            "unknown_entropy": tau}


def _conformal(uq, item: Pending, pred: Prediction | None, spans: list[ScoredSpan], u_seq: float | None,
               scored: bool) -> ConformalDecision:
    """What the conformal threshold keeps of the answer.  It was fitted on û of the backbone's own answers: a
    given answer's spans are judged on that scale (the own-answer mapping of their raw û), not the given one."""
    from .guarantee import decide

    own = uq.calibration.for_source("generated")
    u_fit = [s.u for s in spans] if item.source == "generated" else list(own.scores([s.u_raw for s in spans]))
    seq_fit = (u_seq if item.source == "generated" or pred is None or pred.u_seq_raw is None
               else float(own.scores([pred.u_seq_raw])[0]))
    return ConformalDecision(**decide(uq.guarantee, u_fit, seq_fit, scored))


def assemble(uq, item: Pending, pred: Prediction | None, failed: list[tuple[int, int]], probe_s: float) -> ScoreResult:
    """The record of one answer, with its status (`spanuq.score.status`) and, under a conformal
    threshold, what it keeps; ``pred`` None: no window could be read (or the answer is empty)."""
    answer = item.answer
    shown_by = uq.calibration.for_source(item.source, item.passages is not None)  # its spans' cut, red line
    spans = [] if pred is None else [
        ScoredSpan(start=s.start, end=s.end, text=answer[s.start:s.end], b=s.b, e=s.e, u=s.u, u_raw=s.u_raw,
                   validity=s.validity, nu=None if s.nu != s.nu else s.nu) for s in pred.shown()]  # NaN: no ν
    u_seq = None if pred is None else float(pred.u_seq)
    n_windows = len(plan_windows(len(item.ids), uq.window)) if item.ids else 0
    unreadable = int((~readable(item.states.h, item.states.entropy)).sum()) if item.states is not None else 0
    reasons = assess(StatusCheck(
        answer=answer, backbone=uq.backbone_name, probe_backbone=uq.extra.get("backbone"),
        languages=uq.cfg.score.languages, n_tokens=len(item.ids), unreadable_tokens=unreadable,
        failed_windows=[(item.offsets[s][0], item.offsets[e - 1][1]) for s, e in failed], n_windows=n_windows,
        prompt=item.request.prompt, u_seq=u_seq, spans=spans, extra=_knowledge(uq, item, spans)))
    conformal = None if uq.guarantee is None else _conformal(uq, item, pred, spans, u_seq, not reasons)
    return ScoreResult(prompt=item.request.prompt, answer=answer, answer_source=item.source,
                       backbone=uq.backbone_name, probe=uq.probe_source, generator=item.generator,
                       n_tokens=len(item.ids), truncated=item.truncated, u_seq=u_seq,
                       validity_threshold=shown_by.validity_threshold, spans=spans, flag_threshold=shown_by.flag,
                       status=status_of(reasons),
                       calibration_source=uq.calibration.fitted_for(item.source, item.passages is not None),
                       **({} if item.passages is None else
                          grounded.context_fields(item.passages, item.windows[item.window], item.window)),
                       status_reasons=reasons, warnings=[r.message for r in reasons], conformal=conformal,
                       windows=n_windows,
                       timings=Timings(generate_s=None if item.generate_s is None else round(item.generate_s, 4),
                                       backbone_s=round(item.backbone_s, 4), probe_s=round(probe_s, 4),
                                       total_s=round(time.perf_counter() - item.t_start, 4)))
