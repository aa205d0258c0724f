"""The surface prior: what a reader of the answer can guess without the model's states.

A logistic regression on four cues that need no backbone at all,

    x = [prompt overlap, relative position b/T, log span length, domain one-hot],

fitted on the train split's soft labels (each span enters twice, as a positive
with weight u* and a negative with weight 1 − u*, so the fit minimises the
soft-label cross-entropy).  It is the floor of every table: a number a method
reaches only by reading where a span sits, how long it is and whether it
repeats the question is not evidence that the method sees uncertainty.

* prompt overlap: the share of the span's words (lower-cased, stop words
  dropped) that also occur in the prompt;
* relative position: the span's first token over the answer's length;
* span length: log(1 + tokens).
"""
from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import numpy as np

from ..features.dataset import ResponseExample
from ..label.sample_answers import parent_id
from .base import Granularity, SpanScorer

FEATURES = ("prompt_overlap", "relative_position", "log_length")
_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str, stop: frozenset[str]) -> set[str]:
    return {w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in stop}


def prompt_overlap(span_text: str, prompt: str, stop: frozenset[str] = frozenset()) -> float:
    """Share of the span's content words that occur in the prompt (0 for a span with none)."""
    words = _words(span_text, stop)
    return len(words & _words(prompt, stop)) / len(words) if words else 0.0


class SurfacePrior(SpanScorer):
    """Logistic regression on surface cues of each labelled span (module docstring)."""

    name: ClassVar[str] = "surface_prior"
    granularity: ClassVar[Granularity] = "span"
    oracle_spans: ClassVar[bool] = True

    def __init__(self, prompts: dict[str, str] | None = None, span_texts: dict[str, list[str]] | None = None,
                 domains: tuple[str, ...] = ("biography", "longform_qa", "triviaqa", "eli5", "felm", "custom"),
                 C: float = 1.0, seed: int = 0):
        self.prompts = prompts or {}
        self.span_texts = span_texts or {}
        self.domains, self.C, self.seed = tuple(domains), C, seed
        self.model = None
        from spacy.lang.en.stop_words import STOP_WORDS

        self.stop = frozenset(STOP_WORDS)

    @classmethod
    def from_config(cls, cfg, **overrides: Any) -> "SurfacePrior":
        from ..pipeline.files import read_records
        from ..pipeline.paths import StagePaths
        from ..pipeline.records import LabeledResponse, Prompt

        prompts, texts = {}, {}
        for paths in (StagePaths.fitted_on(cfg), StagePaths.from_config(cfg)):  # train/dev's run, then this one
            if paths.prompts.exists():
                prompts.update({p.id: p.text for p in read_records(paths.prompts, Prompt)})
            if paths.labels.exists():
                texts.update({r.prompt_id: [s.text for s in r.spans] for r in read_records(paths.labels, LabeledResponse)})
        return cls(**{"prompts": prompts, "span_texts": texts, "seed": cfg.train.seed, **overrides})

    def features(self, examples: list[ResponseExample]) -> np.ndarray:
        """(ΣK, 3 + #domains) design matrix, spans in example order."""
        rows = []
        for e in examples:
            texts = self.span_texts.get(e.prompt_id)
            if len(e.spans) and (texts is None or len(texts) != len(e.spans)):
                raise KeyError(f"surface_prior: no span texts for {e.prompt_id!r} (labels.jsonl out of date?)")
            prompt = self.prompts.get(parent_id(e.prompt_id), "")
            onehot = [float(e.domain == d) for d in self.domains]
            T = max(1, e.n_tokens)
            for (b, end), text in zip(e.spans.tolist(), texts or []):
                rows.append([prompt_overlap(text, prompt, self.stop), b / T, math.log1p(end - b + 1), *onehot])
        return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES) + len(self.domains))

    def fit(self, train: list[ResponseExample], dev: list[ResponseExample]) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        X = self.features(train)
        y = np.concatenate([e.u.numpy() for e in train if len(e.spans)]) if len(X) else np.zeros(0)
        if len(X) == 0:
            raise ValueError("SurfacePrior.fit: no spans in the train split")
        Xd = np.vstack([X, X])
        yd = np.r_[np.ones(len(X)), np.zeros(len(X))]
        w = np.r_[y, 1 - y] + 1e-9
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, random_state=self.seed,
                                                                        max_iter=1000))
        self.model.fit(Xd, yd, logisticregression__sample_weight=w)

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        if self.model is None:
            raise RuntimeError("SurfacePrior: call fit(train, dev) first")
        X = self.features(examples)
        p = self.model.predict_proba(X)[:, 1] if len(X) else np.zeros(0)
        counts = [len(e.spans) for e in examples]
        return list(np.split(p.astype(np.float64), np.cumsum(counts)[:-1])) if examples else []
