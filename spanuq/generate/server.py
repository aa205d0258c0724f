"""OpenAI-compatible server backend: `vllm serve` on a cluster, llama.cpp server here.

Sends the chat-templated prompt to ``/completions`` so every backend sees the same
template; asks for ``n`` samples at once and tops up one by one (with derived seeds)
when a server returns fewer choices than asked (llama.cpp serves n=1).
"""
from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

from ..config import Config
from ..llm.openai_client import OpenAIClient
from .base import Completion


class ServerGenerator:
    name = "server"

    def __init__(self, cfg: Config, server=None):
        """``server``: the `LlamaCppServer` (or a list of them) this process started for us, if
        any: prompts are spread over them in turn (all run the same GGUF with the same threads,
        requests carry their seeds and each is decoded from an empty KV cache,
        `spanuq.llm.llamacpp_server`: answers do not depend on which server serves a prompt, nor on
        what it served before), and a server's death is reported as a crash
        (status or signal + log tail) instead of "cannot reach"."""
        g = cfg.generate
        self.cfg = g
        servers = server if isinstance(server, (list, tuple)) else ([server] if server is not None else [])

        def client(srv, url):
            liveness = (lambda: srv.raise_if_dead(grace_s=2.0)) if srv is not None else None
            return OpenAIClient(url, g.api_key_env, g.timeout_s, g.max_retries, liveness=liveness)

        self.clients = [client(s, s.base_url) for s in servers] or [client(None, g.server_url)]
        self.client = self.clients[0]
        models = [c.check() for c in self.clients][0]  # fail fast, clearly, if a server is down
        self.model = g.server_model or (models[0] if models else "default")
        self.concurrency = max(g.concurrency, len(self.clients))
        self._turn = itertools.count()

    def _complete(self, prompt: str, n: int, temperature: float, seed: int, client=None) -> list[Completion]:
        budget = self.cfg.max_new_tokens if temperature == 0 else (self.cfg.sample_max_new_tokens
                                                                   or self.cfg.max_new_tokens)
        payload = {
            "model": self.model, "prompt": prompt, "max_tokens": budget,
            "temperature": temperature, "n": n, "seed": seed,
        }
        if self.cfg.stop:
            payload["stop"] = list(self.cfg.stop)
        if temperature > 0:
            payload["top_p"] = self.cfg.top_p
        data = (client or self.client).post("completions", payload)
        out = [
            Completion(c.get("text", "").strip(), "length" if c.get("finish_reason") == "length" else "stop")
            for c in data.get("choices", [])
        ]
        return out

    def _samples(self, prompt: str, n: int, seed: int, client=None) -> list[Completion]:
        out = self._complete(prompt, n, self.cfg.temperature, seed, client)[:n]
        k = len(out)
        while len(out) < n:
            out += self._complete(prompt, 1, self.cfg.temperature, seed + 1000 * k, client)[:1]
            k += 1
        return out

    def _clients(self, n: int) -> list:
        """The servers for the next n prompts, in turn across calls."""
        return [self.clients[next(self._turn) % len(self.clients)] for _ in range(n)]

    def greedy(self, prompts: list[str]) -> list[Completion]:
        with ThreadPoolExecutor(self.concurrency) as ex:
            return list(ex.map(lambda p, c: self._complete(p, 1, 0.0, self.cfg.seed, c)[0],
                               prompts, self._clients(len(prompts))))

    def greedy_stream(self, prompt: str, max_new_tokens: int | None = None):
        """The greedy answer as it is generated: yields ``(text delta, finish_reason or None)``
        (the server's ``stream: true``); closing the generator stops the generation."""
        payload = {"model": self.model, "prompt": prompt, "max_tokens": max_new_tokens or self.cfg.max_new_tokens,
                   "temperature": 0.0, "n": 1, "seed": self.cfg.seed}
        if self.cfg.stop:
            payload["stop"] = list(self.cfg.stop)
        for event in self.client.stream("completions", payload):
            for c in event.get("choices", [])[:1]:
                yield c.get("text", ""), c.get("finish_reason")

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]:
        with ThreadPoolExecutor(self.concurrency) as ex:
            return list(ex.map(lambda p, s, c: self._samples(p, n, s, c), prompts, seeds, self._clients(len(prompts))))

    def close(self) -> None:
        for c in self.clients:
            c.close()
