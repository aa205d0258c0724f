"""What every view says beside the spans: what û means for the answer's source, the red line, the ranking, what
the sources say of a span, the conformal line and which probe scored (the terminal and the HTML views share them).
"""
from __future__ import annotations


LEGEND = "û: 0 = the model would say this again, 1 = likely wrong"  # the scale's ends, any source
MEANING = {  # what û means, per answer source, in one line
    "generated": "û = chance the backbone would not say this again (its own answer)",
    "given": "û = chance this fact is wrong (an answer the backbone did not write; calibrated on planted errors)",
}
UNCALIBRATED_GIVEN = ("û = chance the backbone would not say this again, read as if it had written this answer "
                      "(this probe has no calibration for answers it did not write: high û is common, rank, do not read)")
TIP = {  # what a span's û is, in the few words of its tooltip, per answer source
    "generated": "chance the backbone would not say this again",
    "given": "chance this fact is wrong",
}
TIP_UNCALIBRATED = "read as if the backbone had written this answer (rank, do not read)"
NU_LINE = "ν: how sure the probe is of û itself (the precision of its Beta; higher = û is firmer)"
VALIDITY_LINE = "validity: how likely the probe's query found a real claim here"  # and the cut: `validity_line`
WITH_SOURCES = "û with sources = chance the sources do not back this span (red: likely not backed by them)"
HOW_TO_CHOOSE = "choose with --model shipped | DIR | models:/spanuq-<backbone>@champion"


def legend(result) -> str:
    """One line: what û means for this answer's source, and from where a span is shown as likely wrong."""
    meaning = MEANING.get(result.answer_source, LEGEND)
    if getattr(result, "context", None) is not None:
        return WITH_SOURCES + ("" if result.status == "scored" else
                               "; grey: SpanUQ could not judge this answer (why: below)")
    if result.answer_source == "given" and getattr(result, "calibration_source", "given") == "generated":
        return (f"{UNCALIBRATED_GIVEN}; red from û ≥ {result.flag_threshold:.2f}, the own answers' threshold"
                if result.status == "scored" else f"{UNCALIBRATED_GIVEN}; grey: SpanUQ could not judge this answer")
    if result.status != "scored":
        return f"{meaning}; grey: SpanUQ could not judge this answer (why: below), so no span is marked likely wrong"
    return (f"{meaning}; red = likely wrong, from û ≥ {result.flag_threshold:.2f} "
            "(chosen on held-out answers so that most red spans are wrong)")


def validity_line(result) -> str:
    """What a span's validity is and which spans the probe's cut leaves out, as the listed spans bear out: a
    name, date or number of a pasted answer is shown on its own with the validity of the query over it, which
    may be under the cut (`spanuq.score.facts`), so a list with such spans says so instead of "not shown"."""
    cut = result.validity_threshold
    line = f"{VALIDITY_LINE} (spans under the probe's cut, {cut:.2f}, are not shown"
    if any(s.validity < cut for s in result.spans):
        return line + "; a name, date or number is shown on its own whatever its validity)"
    return line + ")"


def tip_meaning(result) -> str | None:
    """What a span's û means for this result's answer source, in a tooltip's words; None when unverified."""
    if result.status != "scored":
        return None
    if result.answer_source == "given" and getattr(result, "calibration_source", "given") == "generated":
        return TIP_UNCALIBRATED
    return TIP.get(result.answer_source)


def result_spans(result) -> list[Span]:
    """(start, end, û) of a `spanuq.score.schema.ScoreResult`'s spans."""
    return [(s.start, s.end, s.u) for s in result.spans]


def judged_flag(result) -> float | None:
    """The likely-wrong threshold a view colours a result with; None (grey, nothing likely wrong) when
    SpanUQ could not judge the answer (``status`` unverified)."""
    return result.flag_threshold if result.status == "scored" else None


def likely_wrong(u: float, flag: float | None) -> bool:
    return flag is not None and u >= flag


def ranked(result) -> list:
    """The result's spans, most doubtful first (ties: in reading order)."""
    return sorted(result.spans, key=lambda s: (-s.u, s.start))


def against(s, flag: float | None) -> str:
    """What the sources say of a span scored with them: ``[id] states it: check`` / ``contradicted by [id]`` /
    ``not supported by the sources`` when it is shown as likely wrong, else ``read against [id]``; empty
    without sources."""
    if getattr(s, "passage", None) is None:
        return ""
    if likely_wrong(s.u, flag) and s.support == "stated":
        return f"[{s.passage}] states it: check"
    if likely_wrong(s.u, flag) and s.support == "contradicted":
        return f"contradicted by [{s.passage}]"
    if likely_wrong(s.u, flag):
        return "not supported by the sources"
    return f"read against [{s.passage}]"


def sources_lines(result) -> list[str]:
    """One line per passage the answer was read against: its id, title, characters read and windows."""
    if result.context is None:
        return []
    focused = ("; focused on the question: only the pieces most relevant to it were read"
               if result.context_focused else "")
    out = [f"sources ({result.context_windows} window{'s' * (result.context_windows != 1)}{focused}):"]
    for p in result.context:
        read = [r for r in result.context_read if r.id == p.id]
        where = ", ".join(f"{r.start}-{r.end}" + (f" (window {r.window})" if result.context_windows > 1 else "")
                          for r in read)
        text = p.text if len(p.text) <= 100 else p.text[:97] + "..."
        out.append(f"  [{p.id}] {p.title + ': ' if p.title else ''}{text!r}  read: chars {where or 'none'}")
    return out


def conformal_line(c) -> str:
    """What a conformal threshold keeps of one answer, in one line."""
    lam = "none" if c.threshold is None else f"{c.threshold:.3f}"
    what = ("the answer is held back as a whole" if c.abstain
            else f"{len(c.flagged)} span{'s' * (len(c.flagged) != 1)} above it")
    extra = f", δ = {c.delta:g}" if c.delta is not None else ""
    return f"conformal {c.guarantee} (α = {c.alpha:g}{extra}): threshold {lam}; {what} — {c.statement}"


def probe_line(probe: str) -> str:
    """Which probe scored, and how to choose another (every view says it)."""
    return f"probe: {probe}; {HOW_TO_CHOOSE}"
