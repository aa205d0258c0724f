"""Scoring answers with a trained probe: the `SpanUQ` API (scorer.py), its result schema
(schema.py), the HTTP service (service.py), the MLflow model (mlflow_model.py), the views of
scored spans (views.py, web/) and the `spanuq score` / `spanuq serve` commands (commands.py).

Names are imported on first use, so `spanuq --help` and the light stages do not load torch.
"""
from importlib import import_module

_NAMES = {"SpanUQ": "scorer", "InputError": "scorer", "GenerationError": "scorer", "ScoreResult": "schema", "ScoredSpan": "schema",
          "ScoreRequest": "schema", "Timings": "schema"}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
