"""The `Generator` interface that every backend implements."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..config import Config


@dataclass
class Completion:
    text: str
    finish_reason: str = "stop"  # stop | length | error
    error: str | None = None


class Generator(Protocol):
    """Decodes chat-templated prompt strings.

    `greedy` returns one completion per prompt (T = 0); `sample` returns `n`
    completions per prompt at the configured temperature / top-p, seeded per prompt.
    """

    name: str

    def greedy(self, prompts: list[str]) -> list[Completion]: ...

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]: ...

    def close(self) -> None: ...


def make_generator(cfg: Config, server=None) -> Generator:
    """The backend named by ``generate.backend`` (resolved: not ``auto``); ``server`` is the
    llama.cpp server started for a ``server`` backend, watched for crashes."""
    kind = cfg.generate.backend
    if kind == "hf":
        from .hf import HFGenerator

        return HFGenerator(cfg)
    if kind == "server":
        from .server import ServerGenerator

        return ServerGenerator(cfg, server=server)
    if kind == "vllm":
        from .vllm import VLLMGenerator

        return VLLMGenerator(cfg)
    raise ValueError(f"unknown generate.backend {kind!r}")
