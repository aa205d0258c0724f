"""An answer scored against sources: the windows it is read in, how their verdicts combine, what each span was
read against.  (How sources reach the backbone is `spanuq.context.render`; docs/context.md.)

**Focus.**  Sources past ``score.context_focus_tokens`` tokens are read in part: their pieces most relevant
to the question, in one window (`spanuq.context.focus`; ``context_focused`` in the result).

**Windows.**  Sources that fit the budget are read in one window; longer ones in K windows, each the same
conversation with a consecutive group of passages (`render_windows`), and the answer is scored after each.
The windows' verdicts combine per claim as

    û(span) = min_k û_k(span),        û_seq = min_k û_seq,k

where û_k is the span's û read after window k: spans of different windows are one claim when their
characters overlap by IoU ≥ 1/2, and a claim one window does not show takes the û of the windows that do.
With sources, û is "the sources, as read by the backbone, do not back this span"; a claim is backed by
the sources when **any** passage backs it, and a window holding no passage about it reads it as unsupported
(high û), not as backed.  So the window that reads it lowest — the one holding the passage that states it —
speaks for the whole, and a span is flagged only when no window backs it.  The minimum is the any-window
rule's natural form; its cost is that noise in one window can only lower û (K windows give K chances to
read a claim as backed), which is why sources past ``score.max_context_windows`` windows are refused
rather than read in ever more windows.  The status reasons of all windows are kept.

**What a span was read against.**  Of the passages its window read, the one sharing most content words
with the span's clause (other than the span's own words; ties: with its sentence).  A span at or above
the likely-wrong threshold is

* ``stated`` when that passage's sentence most like the span's (sharing at least `SPEAKS_OF` of its other
  content words, and more than any other of its sentences) holds every word of the span, read as the
  backbone reads it (number words with their digits): the source says the same there, and the probe
  doubts it anyway — the reader should look;
* ``contradicted`` when the passage shares at least `SPEAKS_OF` words of its sentence otherwise (the
  source speaks of the sentence and the probe, reading it, doubts the span);
* ``unsupported`` when no passage speaks of it.

This marks the display; it does not change û.
"""
from __future__ import annotations

import re

from ..context.passages import ContextError, Passage, as_passages
from ..context.focus import focus, question_of, sentence_spans
from ..context.numbers import with_digits
from ..context.render import RenderedChat, count_tokens, render, render_windows
from .errors import InputError
from .schema import ContextPassage, ScoredSpan, ScoreResult, SourceRead, Timings

SAME_CLAIM_IOU = 0.5  # spans of two windows overlapping this much (characters) are one claim
SPEAKS_OF = 2  # content words a passage shares with a span's sentence to speak of it
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("""a an and are as at be been but by for from had has have he her his in is it its of on or
    she that the their there they this to was were which who with not no than then also into about after before
    over under more most very can could would should will may might do does did so such these those what when
    where how why all any each other""".split())


def checked_passages(context, limits) -> list[Passage]:
    """The request's ``context`` as passages, or `InputError` with the reason (``limits``: `ScoreConfig`)."""
    try:
        return as_passages(context, limits.max_context_chars, limits.max_context_passages)
    except ContextError as e:
        raise InputError(str(e), e.status) from None


def windows_for(tok, messages: list[dict], passages: list[Passage], system_prompt: str | None, max_context: int,
                answer_room: int, limits) -> list[RenderedChat]:
    """The windows an answer of ``answer_room`` tokens is read in after ``messages`` with ``passages``: one window
    of their pieces most relevant to the question when they pass ``limits.context_focus_tokens``
    (`spanuq.context.focus`), else every character, in as many windows as they need."""
    budget = min(limits.context_tokens or max_context, max_context) - answer_room
    try:
        if limits.context_focus_tokens and sum(count_tokens(tok, p.text) for p in passages) > limits.context_focus_tokens:
            window = render(tok, messages, focus(tok, passages, question_of(messages), limits.context_focus_tokens),
                            system_prompt)
            if window.n_tokens <= budget:
                return [window]
        return render_windows(tok, messages, passages, budget, system_prompt, limits.max_context_windows)
    except ContextError as e:
        raise InputError(str(e), e.status) from None


def context_fields(passages: list[Passage], window: RenderedChat, k: int) -> dict:
    """The result's fields of an answer read after window ``k``."""
    return {"context": [ContextPassage(id=p.id, text=p.text, title=p.title) for p in passages],
            "context_read": [SourceRead(id=r.id, number=r.number, start=r.start, end=r.end, window=k)
                             for r in window.read],
            "context_windows": 1,
            "context_focused": sum(r.end - r.start for r in window.read) < sum(len(p.text) for p in passages)}


def combine(results: list[ScoreResult]) -> tuple[ScoreResult, list[int]]:
    """One result of an answer read after each window of its sources (module docstring), and for each of
    its spans the window that gave its û.  One window: that result unchanged."""
    if len(results) == 1:
        return results[0], [0] * len(results[0].spans)
    from ..model.span_ops import char_iou

    claims: list[tuple[ScoredSpan, int]] = []
    for k, r in enumerate(results):
        for s in r.spans:
            same = next((j for j, (c, _) in enumerate(claims)
                         if char_iou((c.start, c.end), (s.start, s.end)) >= SAME_CLAIM_IOU), None)
            if same is None:
                claims.append((s, k))
            elif s.u < claims[same][0].u:
                claims[same] = (s, k)
    claims.sort(key=lambda c: (c[0].start, c[0].end))
    seqs = [r.u_seq for r in results if r.u_seq is not None]
    reasons, seen = [], set()
    for r in results:
        for x in r.status_reasons:
            if (x.code, x.message) not in seen:
                seen.add((x.code, x.message))
                reasons.append(x)
    first = results[0]
    t = [r.timings for r in results]
    timings = Timings(generate_s=first.timings.generate_s, backbone_s=round(sum(x.backbone_s for x in t), 4),
                      probe_s=round(sum(x.probe_s for x in t), 4), total_s=round(max(x.total_s for x in t), 4))
    merged = first.model_copy(update={
        "spans": [c for c, _ in claims], "u_seq": min(seqs) if seqs else None,
        "context_read": [x for r in results for x in r.context_read], "context_windows": len(results),
        "status": "unverified" if reasons else "scored", "status_reasons": reasons,
        "warnings": [x.message for x in reasons], "conformal": None, "timings": timings})
    return merged, [k for _, k in claims]


def words(text: str) -> set[str]:
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if len(w) > 1 and w not in _STOP}


def sentence_of(answer: str, start: int, end: int, stops: tuple[str, ...] = (".", "!", "?", "\n")) -> str:
    """The sentence of ``answer`` holding characters [start, end) (its clause with ``CLAUSE``)."""
    a = max([i + len(c) for c in stops if (i := answer.rfind(c, 0, start)) >= 0], default=0)
    ends = [i for i in (answer.find(c, end) for c in stops) if i >= 0]
    return answer[a: min(ends) + 1 if ends else len(answer)]


CLAUSE = (".", "!", "?", "\n", ",", ";", ":", " and ", " but ", " while ", " which ")


def read_against(result: ScoreResult, windows: list[int]) -> ScoreResult:
    """``result`` with each span's ``passage`` and, at or above the likely-wrong threshold, ``support``."""
    text = {p.id: p.text for p in result.context or []}
    spans = []
    for s, k in zip(result.spans, windows):
        own = words(s.text)
        clause = words(sentence_of(result.answer, s.start, s.end, CLAUSE)) - own
        sentence = words(sentence_of(result.answer, s.start, s.end)) - own
        best, best_text, shared = None, "", (-1, -1)
        for r in result.context_read:
            if r.window != k:
                continue
            read = text[r.id][r.start:r.end]
            n = (len(clause & words(read)), len(sentence & words(read)))
            if n > shared:
                best, best_text, shared = r.id, read, n
        support = None
        if s.u >= result.flag_threshold:
            support = ("unsupported" if shared[1] < SPEAKS_OF else "stated" if states(best_text, own, sentence)
                       else "contradicted")
        spans.append(s.model_copy(update={"passage": best, "support": support}))
    return result.model_copy(update={"spans": spans})


def states(passage: str, span_words: set[str], sentence_words: set[str]) -> bool:
    """Whether the sentence of ``passage`` most like the span's sentence (``sentence_words``: its content words
    other than the span's; at least `SPEAKS_OF` shared, and more than with any other sentence) holds every
    word of the span, number words read with their digits."""
    read = [words(with_digits(passage[a:b])) for a, b in sentence_spans(passage)]
    shared = sorted((len(sentence_words & w) for w in read), reverse=True)
    if not span_words or not shared or shared[0] < SPEAKS_OF or shared[1:2] == shared[:1]:
        return False
    return span_words <= max(read, key=lambda w: len(sentence_words & w))
