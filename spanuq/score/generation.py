"""How the scorer's backbone writes answers: the managed llama.cpp server, or transformers on the backbone.

``score.generator``: ``llamacpp`` (the server on the shipped GGUF, `spanuq.llm.llamacpp`), ``hf`` (transformers
decodes on the backbone the probe reads) or ``auto`` (llamacpp once its server has proved itself here, else hf,
with one warning).

One place owns the server's life, for every path that generates (`SpanUQ.score`, `score_stream`, the OpenAI
endpoint): it is started on first use with the backbone's context, started anew when it has died (the log says
how it ended), and a failure while it answers reads as its crash report when it died under the request.
llama.cpp decodes in its own process, so nothing is locked while it answers; transformers decodes on the
backbone, under the scorer's lock (`model_lock`).
"""
from __future__ import annotations

import logging
from contextlib import nullcontext

from ..config import Config
from .errors import GenerationError

log = logging.getLogger(__name__)


class Generation:
    """The backbone's generator for one `SpanUQ`: ``kind`` is ``score.generator`` until `resolve` settles it."""

    def __init__(self, cfg: Config, backbone_name: str, max_context: int, lock):
        self.cfg, self.backbone_name, self.max_context, self.lock = cfg, backbone_name, max_context, lock
        self.kind = cfg.score.generator
        self.server = None  # the managed `LlamaCppServer`, started when first needed
        self._client = None

    def resolve(self) -> str:
        """``auto`` → ``llamacpp`` once its server has proved itself here, else ``hf`` (one warning)."""
        if self.kind != "auto":
            return self.kind
        from ..llm.presets import get_preset

        if not get_preset(self.backbone_name).gguf_package:
            self.kind = "hf"
            return self.kind
        try:
            self._start()
            self.kind = "llamacpp"
        except (RuntimeError, TimeoutError, OSError) as e:  # ServerCrashed is a RuntimeError
            log.warning("score.generator=auto: the llama.cpp server cannot run on this machine (%s); "
                        "generating with transformers (hf) instead", str(e).splitlines()[0])
            self.close()
            self.kind = "hf"
        return self.kind

    def model_lock(self):
        """The lock generation holds: transformers' decoding runs the backbone here; llama.cpp's runs in its
        own process (nothing held while it answers)."""
        return self.lock if self.resolve() == "hf" else nullcontext()

    def client(self):
        """The running server's client (`spanuq.generate.server.ServerGenerator`), the server (re)started when
        it is not running; a start that fails raises (``ServerCrashed``, ``RuntimeError``, ``OSError``)."""
        if self.server is not None and not self.server.alive():
            log.warning("%s; starting a new one", self.server.crash_report() or "the llama.cpp server stopped")
            self.close()
        if self.server is None:
            try:
                self._start()
            except Exception:
                self.close()
                raise
        return self._client

    def crash_report(self) -> str | None:
        """How the server ended, when it died (it is then closed: the next `client` starts a new one)."""
        if self.server is None or self.server.alive():
            return None
        report = self.server.crash_report()
        self.close()
        return report

    def failure(self, e: Exception) -> GenerationError:
        """``e``, raised while the backbone answered, as the item's error: the server's crash report when it
        died under it, else the exception itself."""
        return GenerationError(f"generation failed: {self.crash_report() or f'{type(e).__name__}: {e}'}")

    def greedy(self, chat: str) -> tuple[str, bool]:
        """The server's greedy answer to a rendered chat: (text, cut at the budget)."""
        try:
            c = self.client().greedy([chat])[0]
        except Exception as e:  # noqa: BLE001 - this item fails, the others are scored
            raise self.failure(e) from e
        return c.text, c.finish_reason == "length"

    def sample(self, texts: list[str], n: int, max_new_tokens: int, model, tok, seed: int = 0) -> list[list[str]]:
        """``n`` sampled continuations of each raw text at ``generate.temperature`` / ``top_p`` with its stop
        strings; a failure raises `GenerationError` (nothing is kept)."""
        from ..generate.hf import HFGenerator
        from ..generate.server import ServerGenerator

        g = self.cfg.generate.model_copy(update={"max_new_tokens": max_new_tokens,
                                                 "sample_max_new_tokens": max_new_tokens})
        seeds = [seed + 1_000 * i for i in range(len(texts))]
        try:
            if self.resolve() == "llamacpp":
                self.client()
                g = g.model_copy(update={"backend": "server", "server_url": self.server.base_url,
                                         "api_key_env": None, "server_model": None})
                gen = ServerGenerator(self.cfg.model_copy(update={"generate": g}), server=self.server)
            else:
                side = tok.padding_side
                gen = HFGenerator(self.cfg.model_copy(update={"generate": g}), model, tok)
            try:
                with self.model_lock():
                    out = gen.sample(texts, n, seeds)
            finally:
                gen.close()
                if self.kind == "hf":
                    tok.padding_side = side
        except Exception as e:  # noqa: BLE001 - reported as the backbone's failure, nothing kept
            raise self.failure(e) from e
        return [[c.text for c in row] for row in out]

    def _start(self) -> None:
        """Start the managed llama.cpp server (it proves itself on a real prompt) and its client."""
        from ..generate.server import ServerGenerator
        from ..llm.llamacpp import LlamaCppServer
        from ..llm.loading import gguf_path
        from ..llm.presets import get_preset

        self.server = LlamaCppServer(gguf_path(get_preset(self.backbone_name)), n_ctx=self.max_context,
                                     n_threads=self.cfg.score.server_threads).start()
        g = self.cfg.generate.model_copy(update={"backend": "server", "server_url": self.server.base_url,
                                                 "max_new_tokens": self.cfg.score.max_new_tokens,
                                                 "api_key_env": None, "server_model": None})
        self._client = ServerGenerator(self.cfg.model_copy(update={"generate": g}), server=self.server)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.server is not None:
            self.server.stop()
            self.server = None
