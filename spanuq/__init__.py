"""SpanUQ: span-level uncertainty for LLM answers from one forward pass.

    from spanuq import SpanUQ
    uq = SpanUQ.load()                                   # data/<backbone>/probe after `make repro`
    r = uq.score("Who was Marie Curie?")                 # the backbone answers, then the probe scores

The public names are imported on first use (PEP 562): ``import spanuq`` (and `spanuq --help`,
and the stages that need no model) does not load torch.  docs/architecture.md shows the layers.
"""
from importlib import import_module

__version__ = "0.1.0"

_PUBLIC = {  # name -> "module:attribute"
    "SpanUQ": "spanuq.score.scorer:SpanUQ",
    "InputError": "spanuq.score.scorer:InputError",
    "GenerationError": "spanuq.score.scorer:GenerationError",
    "ScoreRequest": "spanuq.score.schema:ScoreRequest",
    "ScoreResult": "spanuq.score.schema:ScoreResult",
    "StreamUpdate": "spanuq.score.schema:StreamUpdate",
    "ScoredSpan": "spanuq.score.schema:ScoredSpan",
    "Timings": "spanuq.score.schema:Timings",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = _PUBLIC[name].partition(":")
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
