"""The errors of scoring: what `SpanUQ` raises for a request it cannot serve (also re-exported by
`spanuq.score.scorer` and ``spanuq``)."""
from __future__ import annotations


class InputError(ValueError):
    """A request SpanUQ cannot score; ``status`` is the HTTP status the service answers with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class GenerationError(RuntimeError):
    """The backbone could not answer (e.g. its llama.cpp server failed); nothing is cached, retry later."""

    status = 503
