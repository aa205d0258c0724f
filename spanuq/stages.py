"""The pipeline's stages: one implementation each, driven by DVC (`spanuq <stage>`),
by Prefect (flows/) and by tests alike.  Each is ``fn(cfg, progress) -> Path``."""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Callable

from .config import Config

# stage name -> "module:function"; imported lazily so `spanuq prompts` does not load torch.
STAGES: dict[str, str] = {
    "prompts": "spanuq.data.prompts:run_prompts",
    "generate": "spanuq.generate.stage:run_generate",
    "index": "spanuq.label.stage:run_index",
    "label": "spanuq.label.stage:run_label",
    "extract": "spanuq.features.stage:run_extract",
    "train": "spanuq.train.stage:run_train",
    "real-answers": "spanuq.label.real_answers:run_real_answers",
    "train-reader": "spanuq.train.reader:run_train_reader",
    "evaluate": "spanuq.evaluate.stage:run_evaluate",
    "baselines": "spanuq.baselines.stage:run_baselines",
    "report": "spanuq.report.stage:run_report",
}


def get_stage(name: str) -> Callable[..., Path]:
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    module, fn = STAGES[name].split(":")
    return getattr(import_module(module), fn)


def run_stage(name: str, cfg: Config, progress: bool = True) -> Path:
    from .pipeline.kernels import pin_cpu_kernels

    pin_cpu_kernels(cfg.backbone.cpu_kernels)  # before the stage's first tensor operation
    return get_stage(name)(cfg, progress=progress)
