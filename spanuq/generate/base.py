"""The `Generator` interface that every backend implements (the factory is `stage.make_generator`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class Completion:
    text: str
    finish_reason: str = "stop"  # stop | length | error
    error: str | None = None


class Generator(Protocol):
    """Decodes chat-templated prompt strings.

    `greedy` returns one completion per prompt (T = 0); `sample` returns `n`
    completions per prompt at the configured temperature / top-p, seeded per prompt.
    The backends that seed each sample on its own (``stage.SEEDED_ONE_BY_ONE``) also take
    ``first``: samples ``first .. n-1`` only, the ones a run with fewer did not draw.
    """

    name: str

    def greedy(self, prompts: list[str]) -> list[Completion]: ...

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]: ...

    def close(self) -> None: ...


def greedy_and_samples(gen: Generator, prompts: list[str], n: int,
                       seeds: list[int]) -> tuple[list[Completion], list[list[Completion]]]:
    """Each prompt's greedy answer and its ``n`` samples: in one pass where the backend decodes
    them together (``llamacpp``), else the greedy answers, then the samples."""
    both = getattr(gen, "greedy_and_samples", None)
    if both is not None:
        return both(prompts, n, seeds)
    return gen.greedy(prompts), gen.sample(prompts, n, seeds)
