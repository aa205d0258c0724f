"""In-process vLLM backend (GPU; `pip install spanuq[gpu]`). Imported lazily.

vLLM reserves ``generate.vllm.gpu_memory_utilization`` of each card at start-up and refuses to
start when less than that is free, so it never shares a process with a transformers backbone:
every GPU stage runs in its own process (DVC commands, the Prefect flows' stage processes, the
baselines' decoding timer), and `close` hands the engine's memory back before anything else loads.
"""
from __future__ import annotations

import contextlib
import logging

from ..config import Config
from ..llm.loading import model_source, release_memory
from ..llm.presets import get_preset
from ..pipeline.paths import models_dir
from .base import Completion

log = logging.getLogger(__name__)


def max_model_len(cfg: Config) -> int:
    """The context vLLM reserves KV cache for: ``generate.vllm.max_model_len``, else the prompt budget plus
    the larger answer budget, rounded up to a multiple of 256."""
    g = cfg.generate
    if g.vllm.max_model_len:
        return g.vllm.max_model_len
    need = g.vllm.prompt_tokens + max(g.max_new_tokens, g.sample_max_new_tokens or 0)
    return -(-need // 256) * 256


def engine_kwargs(cfg: Config) -> dict:
    """The keywords of ``vllm.LLM(...)`` for this config."""
    v = cfg.generate.vllm
    return {"model": model_source(get_preset(cfg.backbone.name), models_dir(cfg)), "dtype": cfg.backbone.dtype,
            "seed": cfg.generate.seed, "max_model_len": max_model_len(cfg),
            "tensor_parallel_size": v.tensor_parallel_size, "gpu_memory_utilization": v.gpu_memory_utilization,
            "enforce_eager": v.enforce_eager}


class VLLMGenerator:
    name = "vllm"

    def __init__(self, cfg: Config):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:  # pragma: no cover - GPU extra
            raise RuntimeError("generate.backend=vllm needs the GPU extra: pip install 'spanuq[gpu]'") from e
        self._SamplingParams = SamplingParams
        self.cfg = cfg.generate
        self.llm = LLM(**engine_kwargs(cfg))

    @staticmethod
    def _completion(o) -> Completion:
        return Completion(o.text.strip(), "length" if o.finish_reason == "length" else "stop")

    def greedy(self, prompts: list[str]) -> list[Completion]:
        sp = self._SamplingParams(n=1, temperature=0.0, max_tokens=self.cfg.max_new_tokens, stop=self.cfg.stop or None)
        return [self._completion(r.outputs[0]) for r in self.llm.generate(prompts, sp, use_tqdm=False)]

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]:
        sps = [
            self._SamplingParams(n=n, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                 max_tokens=self.cfg.sample_max_new_tokens or self.cfg.max_new_tokens, seed=s,
                                 stop=self.cfg.stop or None)
            for s in seeds
        ]
        res = self.llm.generate(prompts, sps, use_tqdm=False)
        return [[self._completion(o) for o in r.outputs] for r in res]

    def close(self) -> None:
        """Shut the engine down and hand its memory back, as vLLM's V1 engine is shut down.

        In V1 the weights and the KV cache live in the EngineCore, a process ``LLM`` starts; the card's
        memory comes back when that process ends.  ``llm.llm_engine.engine_core.shutdown()`` ends it now
        (V1's ``SyncMPClient``), not when the engine is garbage collected, which any reference held
        elsewhere (a traceback's frame, a caller that kept ``self.llm``) puts off.  Then vLLM's teardown
        of this process: ``vllm.distributed.cleanup_dist_env_and_memory`` (its model-parallel groups, the
        distributed environment, garbage, the CUDA cache), or on releases without it
        ``destroy_model_parallel`` + ``destroy_distributed_environment``; then torch's process group and
        this process's CUDA cache."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)  # V1; V0 engines have none
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        try:
            from vllm import distributed
        except ImportError:  # pragma: no cover - a vLLM without the module
            distributed = None
        cleanup = getattr(distributed, "cleanup_dist_env_and_memory", None)
        if cleanup is not None:
            cleanup()
        else:
            for name in ("destroy_model_parallel", "destroy_distributed_environment"):
                fn = getattr(distributed, name, None)
                if fn is not None:
                    fn()
        import torch

        if torch.distributed.is_available() and torch.distributed.is_initialized():
            with contextlib.suppress(AssertionError, RuntimeError):
                torch.distributed.destroy_process_group()
        release_memory()
