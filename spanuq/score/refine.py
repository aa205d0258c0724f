"""Acting on uncertain spans: `SpanUQ.refine(prompt[, response], mode=..., threshold=...)`.

The answer is scored once; every span whose û is above the threshold
(``score.refine_threshold``; by default the answer's likely-wrong threshold, ``flag_threshold``)
is acted on:

* ``flag`` — nothing changes but the marking: the spans above the threshold are
  reported as flagged (no backbone call).
* ``drop`` — the uqlm way (`LongTextUQ(response_refinement=True)` filters out the
  claims below its confidence threshold and has an LLM rebuild the answer from the
  claims it keeps): here a span is a claim's anchor inside a sentence, so the
  sentences holding a span above the threshold are removed and the answer is
  rebuilt from the sentences that remain, verbatim (no LLM rewrite: at 135M a
  rewrite adds new claims of its own).  When every sentence goes, the refined
  answer is empty and ``after`` is None (an abstention).
* ``regenerate`` — each *region* (from an uncertain span's first character to the
  end of its sentence; at most ``score.refine_max_regions``, left to right) is
  asked again: the backbone continues the chat prompt + the answer before the
  region ``score.refine_candidates`` times (sampled at ``generate.temperature``),
  each continuation is cut at its first sentence end and put in place of the
  region, the text after it kept as it was.  Every candidate answer is scored by
  the probe and the most certain one kept: the one with the lowest *region
  uncertainty* (`region_u`: the highest û among its spans that overlap the
  region, or its û_seq when no span does — for a given answer with its own
  calibration, no candidate without a span), the current answer included, so a
  region only changes when a candidate is more certain than what was there *by a
  margin* (``score.refine_margin``; by default the probe's, fitted on dev pairs of
  answers that differ in one fact: the gap in û beyond which the lower one is the
  right answer at the flag precision, `spanuq.metrics.ece.pair_margin`).  Candidates are
  scored as answers of the original's source (a given answer's candidates as given
  answers), so both sides of the comparison are read the same way: the backbone's own
  continuation always looks surer to it than someone else's words, and without the margin a
  right fact the backbone does not know would be swapped for a wrong one it prefers.
  The continuations are also the teacher's check (`spanuq.label`: a claim is supported when
  most re-samples repeat it) read at refine time, `support`: a region whose uncertain spans
  most continuations repeat is kept as it is (the backbone stands by it), and a candidate can
  win only when every span it has over the region is repeated by more than
  ``score.refine_agreement`` of the *other* continuations — where the backbone does not
  know, its samples disagree and nothing is replaced, however sure the probe is of one of them.
  A candidate must also keep, word for word, every span of the region at or below the threshold:
  refine acts on the doubtful spans only, and a sentence rewritten around one of them must not
  take a trusted fact with it.

`RefineResult` gives the answer before and after with both scores and, for every
span of the original answer, what was done to it and its û before and after.
Bad input fails as in `score` (`InputError` before any model call), a backbone
failure raises `GenerationError`; nothing is kept from a failed call.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .schema import ScoreResult
from .errors import InputError

MODES = ("flag", "drop", "regenerate")
_NO_SPACE_BEFORE = ",.;:!?)'\u2019"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RefinedSpan(_Record):
    """One span of the original answer and what refining did to it."""

    start: int = Field(ge=0, description="first character in the original answer")
    end: int = Field(ge=0)
    text: str
    u_before: float
    action: Literal["kept", "flagged", "dropped", "regenerated", "unchanged"] = Field(
        description="kept: û ≤ threshold; flagged (flag mode); dropped: its sentence was removed; "
                    "regenerated: its region was replaced by a more certain candidate; unchanged: above the "
                    "threshold but no candidate was more certain (or past refine_max_regions)")
    new_text: str | None = Field(description="what stands in its place in the refined answer (its region's "
                                             "new text when regenerated); null when dropped")
    u_after: float | None = Field(description="the highest û of the refined answer's spans over `new_text`; "
                                              "null when dropped or when no span is found there")


class RefineRequest(_Record):
    """``POST /refine`` body."""

    prompt: str
    response: str | None = Field(default=None, description="an answer to refine; omitted: the backbone answers")
    mode: str = "regenerate"
    threshold: float | None = Field(default=None, description="û above this is acted on (default "
                                                              "score.refine_threshold, else the answer's "
                                                              "flag_threshold)")
    context: list | None = Field(default=None, description="sources the answer is read against, as in POST /score "
                                 "(docs/context.md); regenerated sentences are written with them in the input")


class RefineResult(_Record):
    prompt: str
    mode: Literal["flag", "drop", "regenerate"]
    threshold: float
    answer_before: str
    answer: str = Field(description="the refined answer ('' when drop removed every sentence)")
    before: ScoreResult
    after: ScoreResult | None = Field(description="the refined answer scored; null when it is empty")
    spans: list[RefinedSpan]
    generations: int = Field(description="backbone generations spent on refining (not the answer itself)")
    candidates_scored: int


def region_u(result: ScoreResult, start: int, end: int) -> float | None:
    """How uncertain ``result`` is over characters [start, end): the highest û of its spans that
    overlap them, or û_seq when none does (no claim the probe finds there). For a given answer None
    instead: its û_seq is mapped without the span term (`spanuq.model.calibration`), so it is not on
    the scale of its spans' û, and a sentence without a claim would win every comparison."""
    us = [s.u for s in result.spans if s.start < end and s.end > start]
    if us:
        return max(us)
    return None if result.answer_source == "given" and result.calibration_source == "given" else result.u_seq


def repeats(text: str, claim: str) -> bool:
    """Whether ``text`` says ``claim`` (whole words, any case)."""
    from ..label.plant import find_value

    return find_value(text, [claim]) is not None


def support(claim: str, continuations: list[str]) -> float:
    """The share of ``continuations`` that repeat ``claim`` (0 when there are none)."""
    return sum(repeats(c, claim) for c in continuations) / len(continuations) if continuations else 0.0


def _words(text: str, start: int, end: int, lo: int, hi: int) -> str:
    """The words of ``text`` that characters [start, end) touch, inside [lo, hi) (a span may end
    inside a word: its tokens need not be whole words)."""
    start, end = max(start, lo), min(end, hi)
    while start > lo and text[start - 1].isalnum():
        start -= 1
    while end < hi and text[end].isalnum():
        end += 1
    return text[start:end].strip()


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with each [start, end) replaced by its new text (sorted, non-overlapping edits) and,
    for each edit, where its new text lies in the result."""
    out, placed, pos, n = [], [], 0, 0
    for start, end, new in sorted(edits):
        out.append(text[pos:start])
        n += start - pos
        placed.append((n, n + len(new)))
        out.append(new)
        n += len(new)
        pos = end
    out.append(text[pos:])
    return "".join(out), placed


def _moved(pos: int, edits: list[tuple[int, int, str]]) -> int:
    """Where a character outside every edit moves to."""
    return pos + sum(len(new) - (end - start) for start, end, new in edits if end <= pos)


def _sentence(answer: str, pos: int) -> tuple[int, int]:
    """The [start, end) of the sentence holding character ``pos`` (with the space that follows it)."""
    from ..label.offline import sentence_ends

    ends = sentence_ends(answer)
    start = 0
    for end in ends:
        if pos < end:
            stop = end
            while stop < len(answer) and answer[stop].isspace():
                stop += 1
            return start, stop
        start = end
    return start, len(answer)


def _first_sentence(text: str) -> str:
    """``text`` up to its first sentence end, not counting an initial ("John B. Smith")."""
    from ..label.offline import sentence_ends

    for end in sentence_ends(text):
        if not (end >= 2 and text[end - 1] == "." and text[end - 2].isupper()
                and (end == 2 or not text[end - 3].isalnum())):
            return text[:end]
    return text


def check_refine(mode: str, threshold: float | None) -> None:
    """Raise `InputError` (422) for a mode or threshold `refine` cannot take (None: the answer's own)."""
    if mode not in MODES:
        raise InputError(f"unknown refine mode {mode!r}; one of {', '.join(MODES)}")
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise InputError(f"the refine threshold is {threshold}; û lies in [0, 1]")


def refine(uq, prompt: str, response: str | None = None, mode: str = "regenerate",
           threshold: float | None = None, answer_source: str | None = None,
           context: list | None = None) -> RefineResult:
    """`SpanUQ.refine` (module docstring); ``answer_source`` and ``context`` as in `SpanUQ.score` (with sources,
    every rewrite is scored against them and ``regenerate`` samples with them in the backbone's input).  Under a conformal
    threshold (``score.conformal_alpha``, docs/guarantees.md) and no explicit ``threshold``, the spans
    above it are acted on, and ``drop`` returns nothing when the guarantee holds the answer back as a whole."""
    s = uq.cfg.score
    g = uq.guarantee if threshold is None else None
    if g is not None:
        threshold = 0.0 if g.threshold is None else min(1.0, max(0.0, g.threshold))
    threshold = s.refine_threshold if threshold is None else float(threshold)
    check_refine(mode, threshold)
    uq.check(prompt, response, context)
    if response is not None and not response.strip():
        raise InputError("the response is empty: there is nothing to refine")
    before = uq.score(prompt, response, answer_source, context)
    if threshold is None:  # the answer's likely-wrong threshold: act on what is shown as likely wrong
        threshold = before.flag_threshold - 1e-9
    uncertain = [sp for sp in before.spans if sp.u > threshold]
    common = dict(prompt=prompt, mode=mode, threshold=threshold, answer_before=before.answer, before=before)
    if g is not None and mode == "drop" and before.conformal is not None and before.conformal.abstain:
        return RefineResult(answer="", after=None, spans=[_span(sp, "dropped", None, None) for sp in before.spans],
                            generations=0, candidates_scored=0, **common)
    if mode == "flag" or not uncertain:
        spans = [_span(sp, "flagged" if sp.u > threshold else "kept", sp.text, sp.u) for sp in before.spans]
        return RefineResult(answer=before.answer, after=before, spans=spans, generations=0, candidates_scored=0,
                            **common)
    if mode == "drop":
        return _drop(uq, before, uncertain, common, context)
    return _regenerate(uq, before, uncertain, common, context)


def _span(sp, action: str, new_text: str | None, u_after: float | None) -> RefinedSpan:
    return RefinedSpan(start=sp.start, end=sp.end, text=sp.text, u_before=sp.u, action=action,
                       new_text=new_text, u_after=u_after)


def _after_u(after: ScoreResult | None, start: int, end: int) -> float | None:
    if after is None:
        return None
    us = [s.u for s in after.spans if s.start < end and s.end > start]
    return max(us) if us else None


def _drop(uq, before: ScoreResult, uncertain, common: dict, context: list | None = None) -> RefineResult:
    answer = before.answer
    cut = sorted({_sentence(answer, sp.start) for sp in uncertain})
    edits = [(a, b, "") for a, b in cut]
    joined, _ = apply_edits(answer, edits)
    rebuilt = joined.strip()
    lead = len(joined) - len(joined.lstrip())  # characters stripped before the first kept one
    after = uq.score(before.prompt, rebuilt, context=context) if rebuilt else None
    spans = []
    for sp in before.spans:
        if any(a <= sp.start < b for a, b in cut):
            spans.append(_span(sp, "dropped", None, None))
        else:
            at = _moved(sp.start, edits) - lead
            spans.append(_span(sp, "kept", sp.text, _after_u(after, at, at + len(sp.text))))
    return RefineResult(answer=rebuilt, after=after, spans=spans, generations=0,
                        candidates_scored=int(after is not None), **common)


def _regions(answer: str, uncertain, limit: int) -> list[tuple[int, int]]:
    """[first uncertain character, end of its sentence) per sentence with an uncertain span, left to right."""
    out: list[tuple[int, int]] = []
    for sp in sorted(uncertain, key=lambda x: x.start):
        a, b = _sentence(answer, sp.start)
        if out and out[-1][1] > sp.start:  # same sentence as the previous region
            continue
        end = b
        while end > sp.start and answer[end - 1].isspace():
            end -= 1
        out.append((sp.start, end))
    return out[:max(0, limit)]


def _regenerate(uq, before: ScoreResult, uncertain, common: dict, context: list | None = None) -> RefineResult:
    from ..llm.loading import chat_prompt

    s = uq.cfg.score
    if context is None:
        chat = chat_prompt(uq.tok, before.prompt, uq.system_prompt)
    elif before.context_windows > 1:
        raise InputError(f"the sources need {before.context_windows} windows: regenerated sentences are written with "
                         "all of them in the backbone's input, so they must fit in one; use mode flag or drop", 413)
    else:
        from .grounded import checked_passages, windows_for

        chat = windows_for(uq.tok, [{"role": "user", "content": before.prompt}], checked_passages(context, s),
                           uq.system_prompt, uq.max_context, s.refine_max_new_tokens + before.n_tokens, s)[0].chat
    margin = s.refine_margin if s.refine_margin is not None else uq.calibration.for_source(
        before.answer_source, context is not None).margin
    current, answer = before, before.answer
    edits: list[tuple[int, int, str]] = []  # in the original answer's characters
    generations = scored = 0
    for k, (a, b) in enumerate(_regions(before.answer, uncertain, s.refine_max_regions)):
        start, end = _moved(a, edits), _moved(b, edits)
        prefix = answer[:start].rstrip()
        space = answer[len(prefix):start]
        conts = uq.sample([chat + prefix], s.refine_candidates, s.refine_max_new_tokens,
                          seed=uq.cfg.generate.seed + 7919 * (k + 1))[0]
        generations += s.refine_candidates
        said = [p for p in (_first_sentence(c.strip()) for c in conts) if p]  # every continuation, repeats kept
        doubted = [_words(before.answer, sp.start, sp.end, a, b) for sp in uncertain if a <= sp.start < b]
        trusted = [_words(before.answer, sp.start, sp.end, a, b) for sp in before.spans
                   if a <= sp.start < b and sp.u <= common["threshold"]]  # refine acts on the others only
        if doubted and all(support(t, said) > s.refine_agreement for t in doubted):
            continue  # the backbone's samples repeat what is there
        pieces, texts, whose = [], [], []
        for i, said_i in enumerate(said):
            piece = ("" if said_i[0] in _NO_SPACE_BEFORE else space or " " * bool(prefix)) + said_i
            text = prefix + piece + answer[end:]
            if text != answer and text not in texts and all(repeats(said_i, t) for t in trusted):
                pieces.append(piece)
                texts.append(text)
                whose.append(i)
        results = uq.score_many([{"prompt": before.prompt, "response": t, "answer_source": before.answer_source,
                                  "context": context} for t in texts], progress=False, return_errors=True) if texts else []
        scored += len(results)
        now = region_u(current, start, end)
        best, best_u = None, (1.0 if now is None else now) - margin
        for p, i, r in zip(pieces, whose, results):
            if isinstance(r, Exception):
                continue
            lo, hi = len(prefix), len(prefix) + len(p)
            u = region_u(r, lo, hi)
            others = said[:i] + said[i + 1:]
            claims = [_words(r.answer, sp.start, sp.end, lo, hi) for sp in r.spans if sp.start < hi and sp.end > lo]
            if u is not None and u <= best_u and all(support(t, others) > s.refine_agreement for t in claims):
                best, best_u = (p, r), u
        if best is not None:
            p, current = best
            edits.append((a - (start - len(prefix)), b, p))
            answer = current.answer
    spans = []
    placed = dict(zip(sorted(edits), apply_edits(before.answer, edits)[1]))
    for sp in before.spans:
        hit = next(((e, placed[e]) for e in sorted(edits) if e[0] <= sp.start < e[1]), None)
        if hit is not None:
            (_, _, new), (x, y) = hit
            spans.append(_span(sp, "regenerated", new, _after_u(current, x, y)))
        else:
            at = _moved(sp.start, edits)
            action = "unchanged" if sp.u > common["threshold"] else "kept"
            spans.append(_span(sp, action, sp.text, _after_u(current, at, at + len(sp.text))))
    return RefineResult(answer=answer, after=current, spans=spans, generations=generations,
                        candidates_scored=scored, **common)
