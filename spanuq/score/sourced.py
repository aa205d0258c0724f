"""Answers scored against sources by the with-sources reader (`spanuq.reader`).

A probe folder with a reader beside it (``<probe>/reader``, or ``data/<backbone>/reader`` next to a pipeline
run's ``data/<backbone>/probe``) scores every answer that comes with ``context`` through the reader: every
sentence of every passage is read by its encoder (nothing is cut, `spanuq.reader.features`), each content word
of the answer gets the chance that the sources do not back it, and the answer's names, numbers and runs of
content words are its spans (`spanuq.reader.spans`), each with the highest chance of its words.  The reader's
calibrations, fitted on real dev items per answer source (`spanuq.train.reader`), are the scorer's with-sources
calibration (``calibration_source``: ``given+context`` / ``generated+context``):

    û(span) = σ(logit(û_raw)/T + b),     û_seq = max over spans of û                  (a given answer)
                                         û_seq = σ(logit(s)/T_seq + b_seq)             (the backbone's own)

s is the answer's score (`spanuq.reader.answer`: how much of it the sources do not back, how it stands to the
question), weighted on the backbone's own answers to train questions with their paragraph; T_seq, b_seq map it
onto "wrong" on its answers to dev questions, both against the gold answers (`spanuq.train.reader.own_calibration`).  Each span names the passage it was read against: the passage of the source piece most like its
best-backed content word.  A reader trained with the backbone's readings takes them from the scorer's backbone
(`spanuq.reader.backbone`: two short passes, after the question and the five source sentences most like the
answer, and after the question alone); the rest of the sources reach the reader through its encoder alone.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.special import expit

from ..context.focus import question_of
from ..context.render import ReadRange, RenderedChat
from ..label.targets import char_span_to_tokens
from ..model.calibration import clipped_logit
from ..reader.answer import answer_columns, answer_score
from ..model.postprocess import Prediction
from .reading import Pending
from .results import assemble
from .schema import ScoreResult


def reader_folder(checkpoint: Path) -> Path | None:
    """The reader that scores answers with sources for the probe at ``checkpoint``, if there is one."""
    for folder in (Path(checkpoint) / "reader", Path(checkpoint).parent / "reader"):
        if (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
            return folder
    return None


def _entities(uq, answer: str) -> list[tuple[int, int]]:
    """The answer's names and numbers (spaCy's entities) when spaCy is installed, else none."""
    from ..label.units import load_spacy
    from .facts import entity_chars

    try:
        return entity_chars(load_spacy(uq.cfg.label.spacy_model), answer)
    except (ImportError, RuntimeError):
        return []


def _prediction(item: Pending, reading, cal, seq: dict) -> Prediction:
    """The reading as the probe's post-processing gives a prediction: one shown span per reader span."""
    rows, chars = [], []
    for s, e in reading.spans:
        t = char_span_to_tokens(item.offsets, s, e)
        rows.append(t if t is not None else (0, 0))
        chars.append((s, e))
    n = len(rows)
    u = cal.scores(reading.u_raw) if n else np.zeros(0)
    if item.source == "generated" and "seq_weights" in seq:
        score = answer_score(answer_columns(item.answer, reading.words, reading.x, reading.u_raw), seq)
        u_seq = float(expit(float(clipped_logit(np.array([score]))[0]) / seq["seq_temperature"] + seq["seq_bias"]))
    else:
        u_seq = float(u.max()) if n else 0.0
    return Prediction(prompt_id="", spans=np.asarray(rows, np.int64).reshape(-1, 2), u=u, validity=np.ones(n),
                      u_seq=u_seq, keep=np.arange(n), u_raw=np.asarray(reading.u_raw, np.float64), u_seq_raw=reading.u_seq_raw,
                      nu=None, chars=np.asarray(chars, np.int64).reshape(-1, 2), threshold=0.0)


def read_with_sources(uq, item: Pending) -> ScoreResult:
    """The result of one answer with sources, read by ``uq.reader``."""
    t0 = time.perf_counter()
    messages = item.chat_given if isinstance(item.chat_given, list) else [
        {"role": "user", "content": item.request.prompt}]
    passages = item.passages
    reading = uq.reader.read([p.text for p in passages], item.answer, question_of(messages),
                             _entities(uq, item.answer))
    cal = uq.calibration.for_source(item.source, grounded=True)
    pred = _prediction(item, reading, cal, uq.reader.calibration.get(item.source) or {})
    whole = tuple(ReadRange(p.id, k, 0, len(p.text)) for k, p in enumerate(passages, 1))  # every passage, whole
    item = replace(item, windows=[RenderedChat(item.chat, item.n_prompt, whole)], window=0)
    result = assemble(uq, item, pred, [], time.perf_counter() - t0)
    by_start = {(s, e): k for k, (s, e) in enumerate(reading.spans)}
    return result.model_copy(update={"spans": [
        s.model_copy(update={"passage": passages[reading.passage[by_start[(s.start, s.end)]]].id}) for s in result.spans]})
