"""Fact spans: in an answer the backbone did not write, each name, date and number is shown as a
span of its own (`split_at_facts`).

The probe places spans where the backbone's own answers hold their claims: a clause such as
"the Nobel Prize in Physics in 1903". In a pasted answer the error a reader looks for is one fact
inside it, a year or a name, and the given-answer mapping (`spanuq.model.calibration`) reads the
backbone's surprisal S = Σ s_t over the span's tokens: over the whole clause the surprise of a
planted "1938" is diluted by the words around it, and two answers that differ in that one year
share every other token. So for the answer's facts — spaCy's named entities and numbers
(PERSON, GPE, DATE, CARDINAL, ...), trimmed of function words as shown spans are
(`snap_token_span`: "the Nobel Prize" → "Nobel Prize"):

* a shown span that overlaps a fact (and is not that fact) is replaced by the facts over it,
  each whole, and the runs of its other tokens, trimmed likewise (a run of function words only
  is dropped), each scored with the span's probe outputs (raw û, validity p, ν);
* a fact no shown span touches is shown with the probe outputs of the query that overlaps it
  most (the one the validity threshold left out); a fact no query touches stays unscored;

and each piece with its own (S, H₀): û_piece = σ(logit(û)/T + b + w · S_piece − v · H₀,piece).
The calibration stores whether it splits (`Calibration.fact_spans`, the given mapping's
``fact_spans``); the backbone's own answers are never split (their spans are where the probe
was trained to put them).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..label.targets import char_span_to_tokens
from ..model.calibration import Calibration, span_terms
from ..model.postprocess import EDGE_PUNCT, Answer, Prediction, function_words, snap_token_span, token_span_to_chars

log = logging.getLogger(__name__)


@lru_cache(maxsize=64)
def parsed(nlp, text: str):
    """spaCy's ``nlp(text)``, kept for the answers read last: a given answer read with sources is parsed for its
    facts and for its names (`spanuq.score.names`) once."""
    return nlp(text)


def entity_chars(nlp, text: str) -> list[tuple[int, int]]:
    """[start, end) characters of each named entity or number spaCy finds in ``text``."""
    return [(ent.start_char, ent.end_char) for ent in parsed(nlp, text).ents if ent.text.strip()]


def fact_tokens(answer: Answer, facts: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The inclusive token span of each fact (characters [start, end)), trimmed of function words
    as shown spans are, in reading order without repeats."""
    out = set()
    for f in facts:
        t = char_span_to_tokens(answer.offsets, *f)
        if t is not None:
            out.add(snap_token_span(answer.offsets, answer.text, *t))
    return sorted(out)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def pieces(answer: Answer, b: int, e: int, facts: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The inclusive token spans a shown span (tokens b..e) is split into: the facts (token spans,
    `fact_tokens`) that overlap it, each whole, and the runs of its other tokens with a content
    word, in reading order; [] when no fact overlaps it or the one that does is the span itself."""
    over = [f for f in facts if overlaps(f, (b, e))]
    if not over or over == [(b, e)]:
        return []
    taken = np.zeros(e - b + 1, dtype=bool)
    for fb, fe in over:
        taken[max(fb, b) - b: min(fe, e) - b + 1] = True
    out = list(over)
    t = b
    while t <= e:
        if taken[t - b]:
            t += 1
            continue
        r = t
        while r + 1 <= e and not taken[r + 1 - b]:
            r += 1
        rb, re_ = snap_token_span(answer.offsets, answer.text, t, r)
        rb, re_ = max(rb, t), min(re_, r)  # growing to whole words must not take a fact's token back
        if rb <= re_ and _has_content(answer, rb, re_):
            out.append((rb, re_))
        t = r + 1
    return sorted(out)


def _has_content(answer: Answer, b: int, e: int) -> bool:
    text = answer.text[answer.offsets[b][0]: answer.offsets[e][1]]
    words = [w.strip(EDGE_PUNCT).lower() for w in text.split()]
    return any(w and w not in function_words() for w in words)


def nearest_query(spans: np.ndarray, fact: tuple[int, int]) -> int | None:
    """The query whose token span overlaps ``fact`` most (token IoU; the first on a tie), None if none does."""
    lo, hi = np.maximum(spans[:, 0], fact[0]), np.minimum(spans[:, 1], fact[1])
    inter = np.clip(hi - lo + 1, 0, None)
    union = (spans[:, 1] - spans[:, 0] + 1) + (fact[1] - fact[0] + 1) - inter
    iou = inter / np.maximum(union, 1)
    return int(np.argmax(iou)) if iou.max() > 0 else None


def split_at_facts(pred: Prediction, answer: Answer, facts: Sequence[tuple[int, int]], surprisal, entropy,
                   calibration: Calibration, lookback=None) -> Prediction:
    """``pred`` with its shown spans split at the answer's facts and the facts no shown span touches
    added (module docstring), each piece scored with the raw û, validity and ν of the query it comes
    from and its own (S, H₀) under ``calibration``. The pieces are appended after the N queries;
    ``keep`` shows them in place of the spans they came from. ``facts``: characters [start, end) of
    each (`entity_chars`); ``surprisal``, ``entropy``: (T,) of the answer's tokens; ``lookback``: (T, layers·heads)
    lookback ratios, where the calibration reads them."""
    if pred.chars is None or pred.u_raw is None or not facts:
        return pred
    facts = fact_tokens(answer, facts)
    new_spans, new_rows, drop = [], [], set()

    def add(part: tuple[int, int], q: int) -> None:
        if part not in new_spans:  # a fact over two shown spans is shown once
            new_spans.append(part)
            new_rows.append(q)

    kept = [(int(q), (int(pred.spans[q, 0]), int(pred.spans[q, 1]))) for q in pred.keep]
    for q, (b, e) in kept:
        parts = pieces(answer, b, e, facts)
        if parts:
            drop.add(q)
            for part in parts:
                add(part, q)
    for f in facts:
        if not any(overlaps(f, span) for _, span in kept):
            q = nearest_query(pred.spans, f)
            if q is not None:
                add(f, q)
    if not new_spans:
        return pred
    spans = np.array(new_spans, dtype=np.int64).reshape(-1, 2)
    rows = np.array(new_rows, dtype=np.int64)
    u_raw = pred.u_raw[rows]
    u = calibration.scores(u_raw, span_terms(surprisal, entropy, spans, lookback if calibration.reads_lookback else None)
                           if calibration.reads_surprisal else None)
    chars = np.array([token_span_to_chars(answer.text, answer.offsets, int(b), int(e)) for b, e in spans],
                     dtype=np.int64).reshape(-1, 2)
    n = len(pred.spans)
    return replace(
        pred, spans=np.concatenate([pred.spans, spans]), u=np.concatenate([pred.u, u]),
        validity=np.concatenate([pred.validity, pred.validity[rows]]), u_raw=np.concatenate([pred.u_raw, u_raw]),
        nu=None if pred.nu is None else np.concatenate([pred.nu, pred.nu[rows]]),
        chars=np.concatenate([pred.chars, chars]),
        keep=np.array([k for k in pred.keep if int(k) not in drop] + list(range(n, n + len(spans))), dtype=np.int64))


def show_facts(pred: Prediction | None, answer: Answer | None, surprisal, entropy, calibration: Calibration,
               spacy_model: str, lookback=None) -> Prediction | None:
    """`split_at_facts` with the answer's facts found by the spaCy pipeline ``spacy_model``, when
    ``calibration`` says so (``fact_spans``: the given calibration) and the answer's text and token
    surprisal are known; else ``pred`` as it is. Every consumer that shows given answers calls this.
    spaCy comes with the ``facts`` extra, not the bare scoring install: without it the probe's spans
    are shown, and a warning says so once."""
    if pred is None or not calibration.fact_spans or answer is None or surprisal is None:
        return pred
    nlp = _spacy(spacy_model)
    if nlp is None:
        return pred
    return split_at_facts(pred, answer, entity_chars(nlp, answer.text), np.asarray(surprisal, dtype=np.float64),
                          np.asarray(entropy, dtype=np.float64), calibration,
                          None if lookback is None else np.asarray(lookback, dtype=np.float64))


@lru_cache(maxsize=2)
def _spacy(name: str):
    """The spaCy pipeline, or None (warned once) where spaCy or the pipeline is not installed."""
    from ..label.units import load_spacy

    try:
        return load_spacy(name)
    except (ImportError, RuntimeError) as e:
        log.warning("given answers are shown with the probe's spans, not each name, date and number on its "
                    "own: that needs spaCy and %s (pip install 'spanuq[facts]'): %s", name, e)
        return None
