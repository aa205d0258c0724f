"""The backbones' shapes (``architectures.yaml``, from their published config.json) and random-weight
builds of them: timings and memory depend on shapes, not weights (benchmarks/bench_gpu.py,
benchmarks/gpu_path.py and its CPU dry run on the shapes scaled down, `spanuq.llm.memory`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

ARCHITECTURES = Path(__file__).with_name("architectures.yaml")


@dataclass(frozen=True)
class Arch:
    name: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0

    def config_kwargs(self) -> dict:
        """The keywords of ``AutoConfig.for_model(model_type, ...)`` (random-weight builds)."""
        kw = {k: v for k, v in self.__dict__.items() if k not in ("name", "model_type")}
        return {k: v for k, v in kw.items() if v or k == "tie_word_embeddings"}


@lru_cache(maxsize=1)
def architectures() -> dict[str, Arch]:
    return {name: Arch(name=name, **shape) for name, shape in yaml.safe_load(ARCHITECTURES.read_text()).items()}


def random_backbone(name: str | Arch, device: str = "cpu", dtype: str = "bfloat16"):
    """The preset backbone ``name`` (or an `Arch`, e.g. one scaled down) with random weights, built on
    ``device`` (no download)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    a = name if isinstance(name, Arch) else architectures()[name]
    config = AutoConfig.for_model(a.model_type, **a.config_kwargs())
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
