"""What the sampling and backbone baselines read beside a `ResponseExample`.

A `ResponseExample` carries the greedy answer, its features and its labelled
spans; the baselines also need the question, the S sampled answers
(``generations.jsonl``) and the text of the claim behind each labelled span
(``labels.jsonl`` → ``claims.jsonl``).  `AnswerContext.load(cfg)` joins them by
prompt id once; `for_examples` checks that every example is covered.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config
from ..label.sample_answers import read_answers
from ..pipeline.files import read_records
from ..pipeline.paths import StagePaths
from ..pipeline.records import Claim, LabeledResponse


@dataclass
class SpanInfo:
    char_start: int
    char_end: int
    text: str  # the span's characters in the answer
    claim: str  # the self-contained claim text (the span text when the labeller has none)


@dataclass
class AnswerInfo:
    prompt_id: str
    question: str
    chat_prompt: str
    answer: str
    samples: list[str]  # the S sampled answers (empty texts of failed samples dropped)
    sample_tokens: list[int]  # generated tokens per kept sample
    spans: list[SpanInfo] = field(default_factory=list)  # aligned with example.spans


@dataclass
class AnswerContext:
    answers: dict[str, AnswerInfo]

    @classmethod
    def load(cls, cfg: Config) -> "AnswerContext":
        """This run's answers, and those of ``evaluate.probe_from`` (its train/dev fit the methods) when set."""
        paths = StagePaths.from_config(cfg)
        here = cls.from_files(paths.generations, paths.labels, paths.claims)
        fit = StagePaths.fitted_on(cfg)
        if fit == paths:
            return here
        there = cls.from_files(fit.generations, fit.labels, fit.claims)
        clash = sorted(k for k in here.answers.keys() & there.answers.keys()
                       if here.answers[k].response != there.answers[k].response)
        if clash:
            raise ValueError(f"evaluate.probe_from={cfg.evaluate.probe_from!r} has other answers under the same prompt "
                             f"ids as this run ({', '.join(clash[:3])}, ...): give the prompt file its own ids")
        return cls({**there.answers, **here.answers})

    @classmethod
    def from_files(cls, generations: Path, labels: Path, claims: Path | None = None) -> "AnswerContext":
        for p in (generations, labels):
            if not Path(p).exists():
                raise FileNotFoundError(f"{p} is missing: run `spanuq generate` and `spanuq label` first")
        claim_text = {}
        if claims is not None and Path(claims).exists():
            claim_text = {c.id: c.text for c in read_records(claims, Claim)}
        gens = {g.prompt_id: g for g in read_answers(generations, labels)}
        answers = {}
        for rec in read_records(labels, LabeledResponse):
            g = gens.get(rec.prompt_id)
            if g is None:
                continue
            kept = [s for s in g.samples if s.finish_reason != "error" and s.text.strip()]
            answers[rec.prompt_id] = AnswerInfo(
                rec.prompt_id, g.prompt_text, g.chat_prompt, rec.response, [s.text for s in kept],
                [len(s.token_ids) for s in kept],
                [SpanInfo(s.char_start, s.char_end, s.text, claim_text.get(s.claim_id, s.text)) for s in rec.spans])
        return cls(answers)

    def for_examples(self, examples) -> list[AnswerInfo]:
        out = []
        for e in examples:
            info = self.answers.get(e.prompt_id)
            if info is None:
                raise KeyError(f"{e.prompt_id}: no generation/label record; re-run `spanuq generate` and `spanuq label`")
            if len(info.spans) != len(e.spans):
                raise ValueError(f"{e.prompt_id}: {len(info.spans)} labelled spans in labels.jsonl, "
                                 f"{len(e.spans)} in the example")
            out.append(info)
        return out
