"""Token Entropy baseline (paper §4.2): mean token-level entropy over each GT span.

For span (b, e) with stored next-token entropies H_t (nats, from the backbone's
output logits at extraction time),

    s = 1 / (e − b + 1) · Σ_{t = b..e} H_t.

H is in [0, log |V|] nats, not a probability.  ``fit`` learns a min–max scaling
on the train split's span means and ``score`` returns the scaled values clipped
to [0, 1], so MAE and ECE are defined; the map is monotone, so AUROC and ρ_s are
those of the raw entropy.  ``normalize=False`` returns raw nats (``bounded``
is then False) and needs no fit.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..features.dataset import ResponseExample
from .base import Granularity, SpanScorer
from .pooling import span_mean
from .scaling import MinMaxScaler


class TokenEntropy(SpanScorer):
    name: ClassVar[str] = "token_entropy"
    granularity: ClassVar[Granularity] = "token"
    oracle_spans: ClassVar[bool] = False  # aggregated over GT spans for evaluation, as in the paper
    requires: ClassVar[tuple[str, ...]] = ("entropy",)

    def __init__(self, normalize: bool = True):
        self.normalize = normalize
        self.scaler = MinMaxScaler()

    @property
    def bounded(self) -> bool:  # type: ignore[override]
        return self.normalize

    def raw_scores(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        """Mean entropy (nats) per span."""
        return [span_mean(e.entropy, e.spans).double().numpy() for e in examples]

    def fit(self, train: list[ResponseExample], dev: list[ResponseExample]) -> None:
        if not self.normalize:
            return
        values = [v for v in self.raw_scores(train) if len(v)] or [v for v in self.raw_scores(dev) if len(v)]
        if not values:
            raise ValueError("TokenEntropy.fit: no spans in train or dev to learn the min-max scaling from")
        self.scaler.fit(np.concatenate(values))

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        raw = self.raw_scores(examples)
        if not self.normalize:
            return raw
        if not self.scaler.fitted:
            raise RuntimeError("TokenEntropy: call fit(train, dev) first (or use normalize=False for raw nats)")
        return [self.scaler(r) for r in raw]
