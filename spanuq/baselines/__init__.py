"""Baselines of paper §4.2 behind one interface: `SpanScorer.fit(train, dev)` / `.score(examples)`.

Build one by name with `make_baseline(name, cfg)`; `BASELINES` lists the names.
Members import lazily, so ``import spanuq.baselines`` stays light.
"""
from .base import BASELINES, Granularity, SequenceScorer, SpanScorer, baseline_class, broadcast_to_spans, make_baseline

__all__ = ["BASELINES", "Granularity", "SequenceScorer", "SpanScorer", "baseline_class", "broadcast_to_spans",
           "make_baseline"]
