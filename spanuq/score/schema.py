"""The typed records of scoring: what `SpanUQ.score` returns, `spanuq score --json` prints
and `POST /score` answers.  The JSON schema published as ``docs/score.schema.json`` is
generated from `ScoreResult` (``python -m spanuq.score.schema docs/score.schema.json``).

Character offsets are Python ``str`` indices (Unicode code points) into ``answer``:
``answer[span.start:span.end] == span.text`` always holds, whatever leading spaces,
newlines or non-ASCII characters the answer holds.  (In JavaScript, index
``Array.from(answer)``, not the UTF-16 string, to get the same characters.)
"""
from __future__ import annotations

import json
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .status import StatusReason

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScoredSpan(_Strict):
    """One span of the answer with its uncertainty."""

    start: int = Field(ge=0, description="first character (code point index into `answer`)")
    end: int = Field(ge=0, description="one past the last character; answer[start:end] == text")
    text: str
    b: int = Field(ge=0, description="first response token (inclusive)")
    e: int = Field(ge=0, description="last response token (inclusive)")
    u: float = Field(ge=0, le=1, description="calibrated û: probability that the span is wrong")
    u_raw: float = Field(ge=0, le=1, description="û before calibration")
    validity: float = Field(ge=0, le=1, description="probability that the query found a real span")
    nu: float | None = Field(default=None, gt=0, description="ν, the Mixture-of-Beta precision (higher = more certain "
                             "of û); null for a span read against sources by the with-sources reader, which gives "
                             "no precision")
    support: Literal["stated", "contradicted", "unsupported"] | None = Field(
        default=None, description="scored with sources, a span at or above the likely-wrong threshold: `stated` "
        "when the passage it was read against says the same in its sentence most like the span's (the probe "
        "doubts it anyway: look), `contradicted` when that passage speaks of its sentence (shares its other "
        "content words) otherwise, else `unsupported`; null otherwise (docs/context.md)")
    passage: str | None = Field(default=None, description="scored with sources: the id of the passage the span was "
                                "read against (of the window that gave its û, the one sharing most words with its "
                                "sentence); null without sources")


class Timings(_Strict):
    """Seconds spent per step of one `score` call."""

    generate_s: float | None = Field(description="generating the answer; null when it was given")
    backbone_s: float = Field(description="the teacher-forced backbone pass (0 when the hidden states "
                                          "were captured during generation)")
    probe_s: float
    total_s: float


class ConformalDecision(_Strict):
    """What a conformal threshold fitted by `spanuq calibrate` says about this answer (docs/guarantees.md)."""

    guarantee: Literal["factuality", "fdr"]
    alpha: float
    delta: float | None
    threshold: float | None = Field(description="claims with û ≤ threshold are kept; null: none is")
    flagged: list[int] = Field(description="indices into `spans` of the spans above the threshold")
    abstain: bool = Field(description="the answer is held back as a whole: û_seq is above the threshold (text outside "
                                      "the spans is not covered) or the answer is unverified")
    statement: str


class ContextPassage(_Strict):
    """One source as the result carries it (the passages given, or retrieved from ``--corpus``)."""

    id: str
    text: str
    title: str | None = None


class SourceRead(_Strict):
    """Characters of one passage the backbone read, in one window of the sources (docs/context.md)."""

    id: str = Field(description="the passage's id")
    number: int = Field(ge=1, description="its number [n] in the backbone's input")
    start: int = Field(ge=0, description="first character of the passage's text read")
    end: int = Field(ge=0, description="one past the last")
    window: int = Field(ge=0, description="the window of the sources that read them")


class ScoreResult(_Strict):
    """An answer with its spans sorted by position, each with a calibrated û, and a sequence score.
    ``status`` says whether SpanUQ could judge it (`spanuq.score.status`): an ``unverified`` answer is
    never free of doubt, whatever its spans say."""

    schema_version: Literal[1] = SCHEMA_VERSION
    prompt: str
    answer: str
    answer_source: Literal["generated", "given"]
    backbone: str
    probe: str | None = Field(default=None, description="which probe scored: `shipped <backbone> probe of <date>, "
                              "sha256 <12 hex>` or `probe <source> (<folder>), sha256 <12 hex>`")
    generator: Literal["llamacpp", "hf"] | None = Field(description="how the answer was generated; null if given")
    n_tokens: int = Field(ge=0, description="response tokens the probe read")
    truncated: bool = Field(description="generation stopped at max_new_tokens")
    windows: int = Field(default=1, ge=0, description="probe windows the answer was read in: 1 up to the probe's "
                                                      "trained length, more for longer answers (docs/score.md); "
                                                      "0 when there was nothing to read")
    u_seq: float | None = Field(ge=0, le=1, description="û_seq, the answer-level score (a given answer's: the mean û "
                                                          "of its shown spans, 0 without one); null when no û could be "
                                                          "computed (status unverified: an empty answer, no readable "
                                                          "states)")
    validity_threshold: float
    flag_threshold: float = Field(default=0.5, ge=0, le=1, description="a span with û at or above this is shown as "
                                  "likely wrong: chosen on held-out answers of this answer's source for precision")
    calibration_source: Literal["generated", "given", "generated+context", "given+context"] = Field(
        default="generated", description="which calibration mapped û: `given` (fitted on answers the backbone did not "
        "write) or `generated` (its own answers'; also for a given answer when the probe has no given-answer "
        "calibration); `+context` when fitted on answers read with their sources (without it, an answer scored with "
        "sources is `unverified`: context_uncalibrated)")
    context: list[ContextPassage] | None = Field(default=None, description="the sources the answer was read against; "
                                                 "null when it was scored without sources")
    context_read: list[SourceRead] = Field(default_factory=list, description="which characters of which passage the "
                                           "backbone read, per window; every character of `context` unless `context_focused`")
    context_focused: bool = Field(default=False, description="the sources were longer than score.context_focus_tokens, "
                                  "so only their pieces most relevant to the question were read (those in "
                                  "`context_read`); a span no read piece backs reads as unsupported (docs/context.md)")
    context_windows: int = Field(default=0, ge=0, description="windows the sources were read in (1 when they fit the "
                                 "budget; a span's û is the lowest over windows, docs/context.md); 0 without sources")
    spans: list[ScoredSpan]
    status: Literal["scored", "unverified"] = Field(
        default="scored", description="scored: SpanUQ judged the answer; unverified: it could not (status_reasons), so "
                                      "the answer is not free of doubt whatever its spans say")
    status_reasons: list[StatusReason] = Field(
        default_factory=list, description="why the answer is unverified: {code, message}; codes empty_answer, "
                                          "no_hidden_states, window_failed, language, probe_backbone_mismatch, ...")
    warnings: list[str] = Field(default_factory=list, description="the status reasons' messages: what makes these "
                                "scores less trustworthy than usual, e.g. an answer in a language the probe was not "
                                "trained on (score.languages)")
    conformal: ConformalDecision | None = Field(default=None, description="the spans a conformal threshold flags "
                                                "(score.conformal_alpha; docs/guarantees.md); null without one")
    timings: Timings

    @model_validator(mode="after")
    def _status_matches_reasons(self):
        if (self.status == "unverified") != bool(self.status_reasons):
            raise ValueError("status is unverified exactly when status_reasons is not empty")
        return self


class StreamUpdate(_Strict):
    """One update of `SpanUQ.score_stream` (``POST /score/stream``'s SSE events, ``spanuq score --stream``):
    the answer so far scored as `score()` scores an answer; the last one has ``done`` true and its
    ``result`` is what ``score(prompt, response=result.answer)`` returns (up to float rounding)."""

    seq: int = Field(ge=0, description="0, 1, 2, ... in the order the updates were made")
    done: bool = Field(description="the answer is complete (the last update)")
    n_generated: int = Field(ge=0, description="tokens generated so far")
    elapsed_s: float = Field(description="seconds since the stream started")
    update_s: float = Field(description="seconds this re-score took (tokenising, the probe, post-processing)")
    tokens_per_s: float = Field(description="generated tokens per second so far, scoring included")
    result: ScoreResult = Field(description="the answer so far with its spans and û")


class ScoreRequest(_Strict):
    """``POST /score`` body and one row of ``spanuq score --file``."""

    prompt: str
    response: str | None = Field(default=None, description="an answer to score; omitted: the backbone answers")
    answer_source: Literal["given", "generated"] | None = Field(
        default=None, description="who wrote `response`: `given` (default: another model or a person) or "
                                  "`generated` (this backbone, e.g. through a server that serves it); "
                                  "û is calibrated for each (ignored without a response)")
    context: list | None = Field(default=None, description="sources to read the answer against: passages, each a "
                                 "string or {text, id?, title?} (docs/context.md); omitted: scored without sources")


class BatchRequest(_Strict):
    items: list[ScoreRequest]


class ItemError(_Strict):
    status: int
    error: str


class BatchResponse(_Strict):
    """One entry per item, in order: a result or that item's error."""

    results: list[ScoreResult | ItemError]


def json_schema() -> dict:
    schema = ScoreResult.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://github.com/spanuq/spanuq/docs/score.schema.json"
    return schema


if __name__ == "__main__":
    text = json.dumps(json_schema(), indent=2) + "\n"
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
