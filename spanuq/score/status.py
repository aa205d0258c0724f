"""Could SpanUQ judge this answer?  ``status``: ``scored``, or ``unverified`` with its reasons.

A result with no span above a threshold reads as "nothing here looks wrong".  That reading is
only earned when the probe actually judged the answer: its hidden states were read, by the
backbone the probe was trained on, on an answer in the probe's language.  When any of that
fails the result says ``unverified`` and why, and every view shows it, so an answer the tool
could not judge is never shown as free of doubt.  The reasons (``StatusReason.code``):

* ``empty_answer`` — the answer is empty (e.g. an upstream server returned no content):
  there is nothing to judge;
* ``no_hidden_states`` — the backbone's states of the answer could not be read (every
  token's state is non-finite: a broken backbone, an overflow in low precision); no û;
* ``window_failed`` — an answer read in windows (longer than the probe's trained length)
  had windows whose states could not be read; their text has no spans and no share of û_seq;
* ``language`` — the answer is clearly in none of the probe's training languages
  (``score.languages``; `spanuq.data.language`), so its û comes from outside its training;
* ``subject_unknown`` — a given answer about a subject the backbone does not know (flat
  predictions before its claims, `spanuq.model.unknown`): the probe cannot tell a right fact
  from a wrong one there;
* ``probe_backbone_mismatch`` — the states were read by another backbone than the probe's,
  or (``spanuq serve --upstream URL --upstream-model ID``) the operator declared that the
  upstream serves the probe's backbone and its reply says otherwise (another model id, another
  tokenizer's token count).  An undeclared upstream may be **any** model: its answer is a given
  answer, read by the probe's backbone and calibrated as one, so who wrote it is no reason;
* ``context_uncalibrated`` — the answer was read with sources (``context``) by a probe that has
  no calibration fitted on answers read with sources: its û is mapped by the calibration
  without them, so what it says there is untested (`Calibration.fitted_for`).

Each reason is one rule: a function of a `StatusCheck` (what is known about the scoring of
one answer) that returns a `StatusReason` or None.  `RULES` holds them in order; a new reason
is one more function decorated with ``@rule``; `assess` runs them all.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["scored", "unverified"]


class StatusReason(BaseModel):
    """Why an answer is ``unverified``: a stable ``code`` and a sentence for people."""

    model_config = ConfigDict(extra="forbid")
    code: str
    message: str


@dataclass
class AnsweredBy:
    """Who wrote a given answer, when SpanUQ forwarded the request (``spanuq serve --upstream``)."""

    model: str  # the model id the upstream answered with
    declared: str | None = None  # the id the operator declared to serve the probe's backbone (--upstream-model)
    completion_tokens: int | None = None  # the upstream's count of the answer's tokens (usage)


@dataclass
class StatusCheck:
    """What the rules read about one scored answer."""

    answer: str
    backbone: str  # the backbone whose states were read
    probe_backbone: str | None = None  # the backbone the probe was trained on (its checkpoint)
    languages: list[str] | tuple[str, ...] | None = None  # score.languages
    n_tokens: int = 0  # the answer's tokens (its canonical tokenisation)
    unreadable_tokens: int = 0  # tokens whose states were not finite
    failed_windows: list[tuple[int, int]] = field(default_factory=list)  # their character ranges
    n_windows: int = 1
    answered_by: AnsweredBy | None = None
    prompt: str | None = None
    u_seq: float | None = None
    spans: list = field(default_factory=list)  # the ScoredSpans shown
    extra: dict = field(default_factory=dict)  # for rules that need more (e.g. the states)


Rule = Callable[[StatusCheck], "StatusReason | None"]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    """Register a status rule (run in the order registered)."""
    RULES.append(fn)
    return fn


def assess(check: StatusCheck) -> list[StatusReason]:
    """The reasons this answer is unverified (empty: it was scored)."""
    return [r for r in (fn(check) for fn in RULES) if r is not None]


def status_of(reasons: list[StatusReason]) -> Status:
    return "unverified" if reasons else "scored"


# ------------------------------------------------------------------ the rules
@rule
def empty_answer(c: StatusCheck) -> StatusReason | None:
    if c.answer.strip():
        return None
    return StatusReason(code="empty_answer", message="the answer is empty: there is nothing to judge")


@rule
def no_hidden_states(c: StatusCheck) -> StatusReason | None:
    if not c.answer.strip() or c.n_tokens == 0 or c.unreadable_tokens < c.n_tokens:
        return None
    return StatusReason(code="no_hidden_states",
                        message=f"the backbone's hidden states of the answer could not be read ({c.backbone} gave "
                                f"non-finite states for all {c.n_tokens} tokens): no span was judged")


@rule
def window_failed(c: StatusCheck) -> StatusReason | None:
    if not c.failed_windows or (c.n_tokens and c.unreadable_tokens >= c.n_tokens):
        return None
    where = ", ".join(f"{a}-{b}" for a, b in c.failed_windows)
    n = len(c.failed_windows)
    return StatusReason(code="window_failed",
                        message=f"{n} of the answer's {c.n_windows} windows could not be scored (non-finite hidden "
                                f"states; characters {where}): that text was not judged")


@rule
def language(c: StatusCheck) -> StatusReason | None:
    from ..data.language import language_warnings

    if not c.languages or not c.answer.strip():
        return None
    said = language_warnings(c.answer, c.languages)
    return StatusReason(code="language", message=said[0]) if said else None


@rule
def probe_backbone_mismatch(c: StatusCheck) -> StatusReason | None:
    if c.probe_backbone and c.probe_backbone != c.backbone:
        return StatusReason(code="probe_backbone_mismatch",
                            message=f"the probe was trained on {c.probe_backbone}'s hidden states; they were read "
                                    f"with {c.backbone}")
    a = c.answered_by
    if a is None or a.declared is None:  # any model's answer is a given answer (module docstring)
        return None
    if a.model != a.declared:
        return StatusReason(code="probe_backbone_mismatch",
                            message=f"the upstream answered with model {a.model!r}, not {a.declared!r}, the model "
                                    f"declared to serve {c.backbone} (--upstream-model)")
    if a.completion_tokens is not None and c.n_tokens and not tokens_agree(a.completion_tokens, c.n_tokens):
        return StatusReason(code="probe_backbone_mismatch",
                            message=f"the upstream counted {a.completion_tokens} tokens in the answer, {c.backbone}'s "
                                    f"tokenizer {c.n_tokens}: the answer was written by a model with another "
                                    "tokenizer, not the probe's backbone")
    return None


@rule
def context_uncalibrated(c: StatusCheck) -> StatusReason | None:
    """An answer read with sources by a probe without a with-sources calibration (``extra["calibration"]``:
    which calibration mapped û, `Calibration.fitted_for`; absent without sources)."""
    cal = c.extra.get("calibration")
    if cal is None or cal.endswith("+context"):
        return None
    return StatusReason(code="context_uncalibrated",
                        message=f"this probe has no calibration fitted on answers read with sources: their û is "
                                f"mapped by its `{cal}` calibration (without sources), so what it says here is "
                                "untested; a probe trained on grounded data carries one")


@rule
def subject_unknown(c: StatusCheck) -> StatusReason | None:
    """A given answer about a subject the backbone does not know: the backbone's predictions before
    the answer's claims are flat (`spanuq.model.unknown`), above the threshold fitted on dev, where
    the questions were mostly ones it answered wrong itself. Its û cannot tell right from wrong there."""
    stat, tau = c.extra.get("knowledge_entropy"), c.extra.get("unknown_entropy")
    if stat is None or tau is None or stat < tau:
        return None
    return StatusReason(code="subject_unknown",
                        message=f"the backbone does not know this subject: its predictions before the answer's "
                                f"claims are flat (entropy {stat:.2f} nats, above {tau:.2f}, where on held-out "
                                "answers it mostly did not know the answer itself), so its scores cannot tell a right "
                                "fact from a wrong one here")


# ------------------------------------------------------------------ helpers of the rules
# the alias under which the project serves a backbone's GGUF (`spanuq llama-server`, LlamaCppServer)
SERVER_ALIASES = {"smollm2-135m": ("smollm2",)}


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def same_backbone(model_id: str, backbone: str) -> bool:
    """Is ``model_id`` (an OpenAI-compatible server's model id: a hub id, a GGUF path, an alias)
    a name of ``backbone``?  Its preset's name or hub id appears in it, or it is the alias the
    project's own llama.cpp server uses."""
    from ..llm.presets import PRESETS

    key = _key(model_id)
    if model_id.strip().lower() in SERVER_ALIASES.get(backbone, ()):
        return True
    preset = PRESETS.get(backbone)
    names = [backbone] + ([preset.hf_id.split("/")[-1]] if preset else [])
    return any(_key(n) and _key(n) in key for n in names)


def tokens_agree(upstream_tokens: int, ours: int) -> bool:
    """The upstream's count of the answer's tokens against the backbone tokenizer's: the same
    tokenizer counts the same tokens, give or take the end-of-turn token and a token merged at a
    stop string; another tokenizer differs by far more on any answer of a few words."""
    return abs(upstream_tokens - ours) <= max(2, round(0.1 * ours))
