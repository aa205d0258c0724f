"""In-process vLLM backend (GPU; `pip install spanuq[gpu]`). Imported lazily."""
from __future__ import annotations

from ..config import Config
from ..llm.loading import model_source
from ..llm.presets import get_preset
from ..pipeline.paths import models_dir
from .base import Completion


class VLLMGenerator:
    name = "vllm"

    def __init__(self, cfg: Config):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:  # pragma: no cover - GPU extra
            raise RuntimeError("generate.backend=vllm needs the GPU extra: pip install 'spanuq[gpu]'") from e
        self._SamplingParams = SamplingParams
        self.cfg = cfg.generate
        source = model_source(get_preset(cfg.backbone.name), models_dir(cfg))
        self.llm = LLM(model=source, dtype=cfg.backbone.dtype, seed=cfg.generate.seed)

    @staticmethod
    def _completion(o) -> Completion:
        return Completion(o.text.strip(), "length" if o.finish_reason == "length" else "stop")

    def greedy(self, prompts: list[str]) -> list[Completion]:
        sp = self._SamplingParams(temperature=0.0, max_tokens=self.cfg.max_new_tokens, stop=self.cfg.stop or None)
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
        pass
