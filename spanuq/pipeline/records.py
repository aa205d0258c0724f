"""The records that flow between stages (the data contracts).

Each file a stage writes is JSONL of one of these models; every record carries
``schema_version`` so a reader can refuse data written by an incompatible version.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
TRAIN_ONLY = "train_only"  # Prompt.meta key of a prompt from `prompts.add_train`

Domain = Literal["biography", "longform_qa", "triviaqa", "eli5", "felm", "custom"]
Split = Literal["train", "dev", "test"]
Verdict = Literal["supported", "unsupported", "ambiguous"]
VERDICT_SCORE: dict[str, float] = {"supported": 1.0, "unsupported": 0.0, "ambiguous": 0.5}


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION

    @model_validator(mode="after")
    def _version(self):
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"{type(self).__name__} has schema_version {self.schema_version}, "
                f"this SpanUQ reads {SCHEMA_VERSION}; re-run the stage that wrote it"
            )
        return self


class Prompt(_Record):
    id: str
    domain: Domain = "custom"
    text: str
    references: list[str] = Field(default_factory=list)  # acceptable reference answers
    split: Split | None = None  # assigned by the prompts stage; re-stratified by label
    meta: dict[str, str] = Field(default_factory=dict)  # e.g. {"popularity": "tail", "source": "nq_open"}
    # an answer written elsewhere (another model, a person): the generate stage reads it
    # teacher-forced in place of the backbone's greedy answer; the samples still come from the backbone
    response: str | None = Field(default=None, exclude_if=lambda v: v is None)
    # sources the backbone answers (and is read) with: passages, each a string or {"text", "id"?, "title"?}
    # (`spanuq.context.passages`), rendered into its input as the scorer renders them (`spanuq.context.render`);
    # the label of such a row comes from the sources (docs/labels.md "Rows with sources")
    context: list[str | dict[str, str]] | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def grounded(self) -> bool:
        """Built from the grounded training pairs (``prompts.grounded``): never in test (`spanuq.data.grounded`)."""
        return "grounded_case" in self.meta

    @property
    def train_only(self) -> bool:
        """Added by ``prompts.add_train``: the label stage keeps it in the training split."""
        return self.meta.get(TRAIN_ONLY) == "true"


class Sample(BaseModel):
    """One decoded response."""

    model_config = ConfigDict(extra="forbid")
    text: str
    token_ids: list[int]  # canonical tokenisation of `text` (tokenizer(text), no specials)
    finish_reason: Literal["stop", "length", "error"] = "stop"
    error: str | None = None


class Generation(_Record):
    prompt_id: str
    backbone: str
    prompt_text: str
    chat_prompt: str  # the chat-templated prompt the backbone saw
    greedy: Sample
    samples: list[Sample]
    decoding: dict[str, float | int | str | None]
    seed: int
    # `greedy` is the prompt's own `response`, not the backbone's answer
    answer_given: bool = Field(default=False, exclude_if=lambda v: not v)

    @property
    def empty(self) -> bool:
        return not self.greedy.text.strip()


class Claim(_Record):
    """An atomic claim of the greedy answer anchored to characters [start, end)."""

    id: str
    prompt_id: str
    text: str  # self-contained claim text (coreference resolved where the labeller can)
    start: int
    end: int
    support: list[float]  # per sample: 1 supported / 0 unsupported / 0.5 ambiguous
    # offline teacher: the backbone's own probability of the claim's anchor, counted as
    # `likelihood_weight` pseudo-samples (`label.likelihood_votes`, `label/likelihood.py`)
    likelihood: float | None = Field(default=None, exclude_if=lambda v: v is None)
    likelihood_weight: float = Field(default=0.0, exclude_if=lambda v: not v)
    evidence: list[str] = Field(default_factory=list)
    repaired: bool = False  # span offsets repaired by fuzzy matching

    @property
    def u(self) -> float:
        """Soft label u* (`soft_label`)."""
        return soft_label(self.support, self.likelihood, self.likelihood_weight)


def soft_label(support: list[float], likelihood: float | None = None, weight: float = 0.0) -> float:
    """u* = 1 − (Σ_s support_s + w·p̄) / (S + w)   (paper Eq. 11 when w = 0: 1 − mean support).

    ``likelihood`` p̄: the backbone's own probability of the claim, counted as ``weight`` (w)
    pseudo-samples that back it (`label/likelihood.py`); nothing to vote gives 1."""
    w = weight if likelihood is not None else 0.0
    n = len(support) + w
    return 1.0 - (sum(support) + w * (likelihood or 0.0)) / n if n > 0 else 1.0


class SpanTarget(BaseModel):
    """A labelled span in response-token coordinates.

    Token indices are inclusive: the span covers tokens ``tok_start..tok_end``.
    The regression target is the continuous interval ``[tok_start/T, (tok_end+1)/T]``,
    so a one-token span has positive width; token ``t`` sits at centre ``(t+0.5)/T``.
    """

    model_config = ConfigDict(extra="forbid")
    claim_id: str
    text: str
    char_start: int
    char_end: int
    tok_start: int
    tok_end: int
    u: float


class LabeledResponse(_Record):
    """All span targets of one greedy answer (one row of labels.jsonl)."""

    prompt_id: str
    domain: Domain
    split: Split
    response: str
    n_tokens: int
    spans: list[SpanTarget]
    u_seq: float | None  # mean of span labels; None when the answer has no claims
    status: Literal["ok", "empty", "no_claims", "error"] = "ok"
    error: str | None = None
    unplaced: int = 0  # claims of this answer that could not be placed on its tokens
    # a given answer the label stage wrote (`spanuq.label.given`): its canonical token ids, since no
    # generation record holds them
    token_ids: list[int] | None = Field(default=None, exclude_if=lambda v: v is None)
    # read with its prompt's sources in the backbone's input (`Prompt.context`): calibrated apart
    with_context: bool = Field(default=False, exclude_if=lambda v: not v)
