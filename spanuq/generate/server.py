"""OpenAI-compatible server backend: `vllm serve` on a cluster, llama.cpp server here.

Sends the chat-templated prompt to ``/completions`` so every backend sees the same
template; asks for ``n`` samples at once and tops up one by one (with derived seeds)
when a server returns fewer choices than asked (llama.cpp serves n=1).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..config import Config
from ..llm.openai_client import OpenAIClient
from .base import Completion


class ServerGenerator:
    name = "server"

    def __init__(self, cfg: Config, server=None):
        """``server``: the `LlamaCppServer` this process started for us, if any: its death is
        then reported as a crash (status or signal + log tail) instead of "cannot reach"."""
        g = cfg.generate
        self.cfg = g
        liveness = (lambda: server.raise_if_dead(grace_s=2.0)) if server is not None else None
        self.client = OpenAIClient(g.server_url, g.api_key_env, g.timeout_s, g.max_retries, liveness=liveness)
        models = self.client.check()  # fail fast, clearly, if the server is down
        self.model = g.server_model or (models[0] if models else "default")

    def _complete(self, prompt: str, n: int, temperature: float, seed: int) -> list[Completion]:
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
        data = self.client.post("completions", payload)
        out = [
            Completion(c.get("text", "").strip(), "length" if c.get("finish_reason") == "length" else "stop")
            for c in data.get("choices", [])
        ]
        return out

    def _samples(self, prompt: str, n: int, seed: int) -> list[Completion]:
        out = self._complete(prompt, n, self.cfg.temperature, seed)[:n]
        k = len(out)
        while len(out) < n:
            out += self._complete(prompt, 1, self.cfg.temperature, seed + 1000 * k)[:1]
            k += 1
        return out

    def greedy(self, prompts: list[str]) -> list[Completion]:
        with ThreadPoolExecutor(self.cfg.concurrency) as ex:
            return list(ex.map(lambda p: self._complete(p, 1, 0.0, self.cfg.seed)[0], prompts))

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]:
        with ThreadPoolExecutor(self.cfg.concurrency) as ex:
            return list(ex.map(lambda ps: self._samples(ps[0], n, ps[1]), zip(prompts, seeds)))

    def close(self) -> None:
        self.client.close()
