"""The public Python API: ``from spanuq.api import SpanUQ`` (see docs/score.md)."""
from .score.schema import ScoredSpan, ScoreRequest, ScoreResult, Timings
from .score.scorer import GenerationError, InputError, SpanUQ

__all__ = ["GenerationError", "InputError", "ScoreRequest", "ScoreResult", "ScoredSpan", "SpanUQ", "Timings"]
