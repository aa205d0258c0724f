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


class HTTPError(Exception):
    """A request the service refuses before scoring (bad body, wrong content type, too large)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def check_input(prompt, response, limits) -> None:
    """Raise `InputError` for a prompt / response that cannot be scored (``limits``: the `ScoreConfig`):
    cheap checks that run before any model is loaded or called."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty")
    if len(prompt) > limits.max_prompt_chars:
        raise InputError(f"the prompt has {len(prompt):,} characters; the limit is {limits.max_prompt_chars:,} "
                         "(score.max_prompt_chars)", 413)
    if response is not None:
        if not isinstance(response, str):
            raise InputError("the response must be a string (leave it out to let the backbone answer)")
        # an empty response is scored: status unverified (empty_answer), never an error nor "clean"
        if len(response) > limits.max_response_chars:
            raise InputError(f"the response has {len(response):,} characters; the limit is "
                             f"{limits.max_response_chars:,} (score.max_response_chars)", 413)
