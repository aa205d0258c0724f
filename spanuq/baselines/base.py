"""The one interface every baseline implements (the registry that builds them by name is registry.py).

A baseline is a `SpanScorer`: ``fit(train, dev)`` then ``score(examples)`` → one
float array per example with one score per ground-truth span (``example.spans``,
in order).  Scores estimate u* ∈ [0, 1] (higher = more likely wrong); a method
whose raw output is not a probability (entropies, eigenvalue sums) either
learns a monotone map onto [0, 1] in ``fit`` (`MinMaxScaler`) or sets
``bounded = False`` and says so in its docstring.

Granularity (paper §4.2, Tab. 1) is where a method natively scores:

- ``token``:    per-token scores, averaged over each span's tokens (Token Entropy).
- ``span``:     one score per span from span features (MLP probe, oracle spans).
- ``sequence``: one score per response, broadcast to all its spans
                (verbalized confidence, P(True), SelfCheckGPT-NLI, SE, INSIDE, KLE):
                subclass `SequenceScorer` and implement ``score_sequences``.
- ``claim``:    per-claim verdicts aggregated per response and broadcast (FActScore).

Sequence metrics (paper Tab. A-seq): the evaluator averages a baseline's span
scores per response (plain mean; baselines have no importance weights), so a
sequence-level method scores its own sequence exactly, and span-level methods
need nothing extra.

Inputs that a `ResponseExample` does not carry (sampled answers, the backbone, a
judge or NLI model) are the scorer's own business: ``from_config`` records where
to find them (e.g. ``StagePaths.from_config(cfg).generations``, keyed by
``example.prompt_id``) and ``fit``/``score`` load them lazily.  ``requires``
names them so the evaluator can skip a baseline whose inputs are missing.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

if TYPE_CHECKING:
    from ..config import Config
    from ..features.dataset import ResponseExample

Granularity = Literal["token", "span", "sequence", "claim"]


class SpanScorer(ABC):
    """Scores the ground-truth spans of responses.

    Class attributes:
      name          registry key.
      granularity   token | span | sequence | claim (see the module docstring).
      oracle_spans  True when the method uses the ground-truth span boundaries
                    (MLP probe); such numbers carry the paper's * in the tables.
      bounded       True when scores lie in [0, 1] (MAE and ECE are meaningful);
                    False for raw scores, which the tables mark with †.
      requires      inputs beyond a ResponseExample's stored fields:
                    "hidden_states", "entropy" (both stored), "samples",
                    "backbone", "nli", "judge".
    """

    name: ClassVar[str]
    granularity: ClassVar[Granularity]
    oracle_spans: ClassVar[bool] = False
    bounded: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_config(cls, cfg: Config, **overrides: Any) -> "SpanScorer":
        """Build from the project config; explicit keyword arguments win."""
        return cls(**overrides)

    def fit(self, train: list[ResponseExample], dev: list[ResponseExample]) -> None:
        """Learn whatever the method learns (a probe, a scaling). Training-free: no-op."""

    @abstractmethod
    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        """One float64 array of shape (K_i,) per example, aligned with ``example.spans``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, granularity={self.granularity!r})"


class SequenceScorer(SpanScorer):
    """A method that scores whole responses; its score is broadcast to every span.

    Implement ``score_sequences(examples) -> (N,)``.  Responses with no spans get
    an empty array from ``score`` but are still passed to ``score_sequences`` (a
    sequence metric may use them).
    """

    granularity: ClassVar[Granularity] = "sequence"

    @abstractmethod
    def score_sequences(self, examples: list[ResponseExample]) -> np.ndarray:
        """(N,) one score per response."""

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        return broadcast_to_spans(self.score_sequences(examples), examples)


def broadcast_to_spans(seq_scores, examples: list[ResponseExample]) -> list[np.ndarray]:
    """Paper §4.2: "sequence- and claim-level baselines broadcast their scores to all spans"."""
    seq_scores = np.asarray(seq_scores, dtype=np.float64).reshape(-1)
    if len(seq_scores) != len(examples):
        raise ValueError(f"{len(seq_scores)} sequence scores for {len(examples)} examples")
    return [np.full(len(e.spans), s, dtype=np.float64) for e, s in zip(examples, seq_scores)]
