"""Baselines that ask the backbone about each labelled claim (paper §4.2).

Every labelled span is the anchor of one claim (``claims.jsonl``); the backbone is
asked about the claim text, in the question's context, through its chat template:

* Verbalized confidence (Tian et al. 2023): "how confident are you … 0 to 100";
  greedy, at most ``baselines.verbalized_max_tokens`` tokens; the first integer
  c ≤ 100 gives û = 1 − c/100.  An answer with no such number is a parse
  failure: it is *counted* (``parse_failures``) and scored 0.5, never dropped.
* P(True) (Kadavath et al. 2022): one forward pass; with p_T, p_F the next-token
  probabilities of "True" and "False",  û = p_F / (p_T + p_F).
* FActScore-style self-verification (Min et al. 2023, the backbone as its own
  verifier): a greedy True/False verdict per claim on P(True)'s question (the first
  generated token; when it is neither word, the larger of p_T and p_F decides,
  FActScore's fallback).  In one run the two share their forward passes; each
  method's cost counts them in full (``BackboneCost.reused_seconds``).
  The answer's score is the fraction of its claims judged False (1 − FActScore),
  broadcast to its spans.

The cost counters (forward passes, prompt and generated tokens) feed the cost
column of the report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..features.dataset import ResponseExample
from .base import Granularity, SpanScorer, broadcast_to_spans
from .context import AnswerContext, AnswerInfo

VERBALIZED = ("Question: {question}\nClaim: {claim}\n"
              "How confident are you that the claim is correct? Reply with only a number from 0 to 100.")
VERBALIZED_PREFIX = "Confidence (0-100): "  # the reply is started for the model, so it continues with a number
P_TRUE = ("Question: {question}\nProposed claim: {claim}\n"
          "Is the proposed claim true or false? Answer with one word: True or False.")
_INT = re.compile(r"\d{1,3}")


@dataclass
class BackboneCost:
    forward_passes: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    reused_seconds: float = 0.0  # time of passes another method already ran (counted for both)


class BackboneAsker:
    """The frozen backbone behind a chat template: next-token probabilities and short greedy answers."""

    def __init__(self, model, tokenizer, batch_size: int = 8, system_prompt: str | None = None):
        self.model, self.tok, self.batch_size, self.system_prompt = model, tokenizer, batch_size, system_prompt
        self.tok.padding_side = "left"
        self.device = next(model.parameters()).device
        self.cost = BackboneCost()
        self._next: dict[str, tuple[np.ndarray, float]] = {}  # text -> (probs, seconds): shared by methods

    def token_id(self, word: str) -> int:
        """The first token of ``word`` as the assistant's reply would start with it."""
        return self.tok(word, add_special_tokens=False)["input_ids"][0]

    def _chat(self, texts: list[str]) -> list[str]:
        from ..llm.loading import chat_prompt

        return [chat_prompt(self.tok, t, self.system_prompt) for t in texts]

    def _encode(self, chats: list[str]):
        enc = self.tok(chats, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        self.cost.prompt_tokens += int(enc["attention_mask"].sum())
        return enc

    @torch.inference_mode()
    def next_token_probs(self, texts: list[str]) -> np.ndarray:
        """(N, V) next-token distribution after each chat-templated text (one forward pass each).

        Every text's pass counts for every method that asks it; a text already asked
        in this run is not recomputed, its measured time is added to ``reused_seconds``."""
        import time

        todo = sorted(dict.fromkeys(t for t in texts if t not in self._next), key=len)  # alike lengths: less padding
        for s in range(0, len(todo), self.batch_size):
            batch = todo[s: s + self.batch_size]
            t0 = time.perf_counter()
            enc = self._encode(self._chat(batch))
            probs = torch.softmax(self.model(**enc).logits[:, -1].float(), -1).cpu().numpy()
            dt = (time.perf_counter() - t0) / len(batch)
            self._next.update((t, (p, dt)) for t, p in zip(batch, probs))
        unique = set(texts)  # claims sharing a clause share their question: asked once
        self.cost.forward_passes += len(unique)
        self.cost.reused_seconds += sum(self._next[t][1] for t in unique - set(todo))
        return np.stack([self._next[t][0] for t in texts]) if texts else np.zeros((0, 0))

    @torch.inference_mode()
    def generate(self, texts: list[str], max_new_tokens: int, prefix: str = "") -> list[str]:
        """Greedy answers (special tokens stripped), the reply started with ``prefix``; batched by length
        (less padding), returned in the order of ``texts``."""
        out: list[str] = [""] * len(texts)
        eos = self.tok.eos_token_id
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for s in range(0, len(order), self.batch_size):
            idx = order[s: s + self.batch_size]
            enc = self._encode([c + prefix for c in self._chat([texts[i] for i in idx])])
            gen = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id, eos_token_id=eos)
            for i, row in zip(idx, gen[:, enc["input_ids"].shape[1]:].tolist()):
                row = row[: row.index(eos)] if eos in row else row
                n = max(len(row), 1)
                self.cost.generated_tokens += len(row)
                self.cost.forward_passes += n
                out[i] = self.tok.decode(row, skip_special_tokens=True).strip()
        return out


def asker_config(cfg):
    """The config with ``backbone.dtype`` = ``baselines.backbone_dtype``; ``cfg`` itself when that is null or
    already the backbone's (the stage then asks the backbone it holds: no second copy)."""
    dtype = cfg.baselines.backbone_dtype
    if dtype is None or dtype == cfg.backbone.dtype:
        return cfg
    return cfg.model_copy(update={"backbone": cfg.backbone.model_copy(update={"dtype": dtype})})


def parse_confidence(text: str) -> float | None:
    """The first integer in 0..100 of a verbalized answer, as a probability; None when there is none."""
    for m in _INT.finditer(text):
        v = int(m.group())
        if v <= 100:
            return v / 100.0
    return None


class BackboneScorer(SpanScorer):
    """Shared plumbing: the answers' claims and a `BackboneAsker`."""

    requires: ClassVar[tuple[str, ...]] = ("backbone",)

    def __init__(self, context: AnswerContext, asker: BackboneAsker, max_new_tokens: int = 6):
        self.context, self.asker, self.max_new_tokens = context, asker, max_new_tokens
        self.notes: dict[str, Any] = {}

    @classmethod
    def from_config(cls, cfg, **overrides: Any) -> "BackboneScorer":
        context = overrides.pop("context", None) or AnswerContext.load(cfg)
        asker = overrides.pop("asker", None)
        if asker is None:
            from ..llm.loading import load_backbone

            model, tok = load_backbone(asker_config(cfg))
            asker = BackboneAsker(model, tok, cfg.baselines.backbone_batch_size, cfg.backbone.system_prompt)
        return cls(context, asker, **{"max_new_tokens": cfg.baselines.verbalized_max_tokens, **overrides})

    def _claims(self, examples, template: str) -> tuple[list[AnswerInfo], list[str]]:
        infos = self.context.for_examples(examples)
        return infos, [template.format(question=i.question, claim=s.claim) for i in infos for s in i.spans]

    @staticmethod
    def _split(flat: np.ndarray, infos: list[AnswerInfo]) -> list[np.ndarray]:
        return list(np.split(np.asarray(flat, dtype=np.float64), np.cumsum([len(i.spans) for i in infos])[:-1])) \
            if infos else []

    def _true_false(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        p = self.asker.next_token_probs(texts)
        if not len(p):
            return np.zeros(0), np.zeros(0)
        return p[:, self.asker.token_id("True")], p[:, self.asker.token_id("False")]


class Verbalized(BackboneScorer):
    name: ClassVar[str] = "verbalized"
    granularity: ClassVar[Granularity] = "claim"

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        infos, texts = self._claims(examples, VERBALIZED)
        answers = self.asker.generate(texts, self.max_new_tokens, VERBALIZED_PREFIX)
        conf = [parse_confidence(a) for a in answers]
        self.notes["parse_failures"] = self.notes.get("parse_failures", 0) + sum(c is None for c in conf)
        self.notes["claims_asked"] = self.notes.get("claims_asked", 0) + len(conf)
        self.notes.setdefault("example_answers", answers[:3])
        return self._split(np.array([0.5 if c is None else 1.0 - c for c in conf]), infos)


class PTrue(BackboneScorer):
    name: ClassVar[str] = "p_true"
    granularity: ClassVar[Granularity] = "claim"

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        infos, texts = self._claims(examples, P_TRUE)
        pt, pf = self._true_false(texts)
        return self._split(pf / np.clip(pt + pf, 1e-12, None), infos)


class SelfVerify(BackboneScorer):
    name: ClassVar[str] = "self_verify"
    granularity: ClassVar[Granularity] = "claim"

    def claim_verdicts(self, texts: list[str]) -> np.ndarray:
        """1.0 where the backbone judges the claim False, else 0.0 (one greedy token each)."""
        p = self.asker.next_token_probs(texts)
        if not len(p):
            return np.zeros(0)
        self.asker.cost.generated_tokens += len(set(texts))  # one verdict token per distinct question
        t_id, f_id = self.asker.token_id("True"), self.asker.token_id("False")
        out = []
        for row in p:
            word = self.asker.tok.decode([int(row.argmax())]).strip().lower()
            out.append(1.0 if word.startswith(("false", "no")) else 0.0 if word.startswith(("true", "yes"))
                       else float(row[f_id] > row[t_id]))
        return np.array(out)

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        infos, texts = self._claims(examples, P_TRUE)  # the same question as P(True): its passes are shared
        per_claim = self._split(self.claim_verdicts(texts), infos)
        return broadcast_to_spans([float(v.mean()) if len(v) else 0.0 for v in per_claim], examples)
