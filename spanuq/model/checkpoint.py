"""Probe checkpoints: ``model.safetensors`` (weights) + ``config.json`` (ProbeConfig, d_model, extras).

No pickle anywhere: weights go through ``safetensors.torch`` and metadata through JSON.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..config import ProbeConfig
from .probe import SpanUQProbe

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


def save_checkpoint(model: SpanUQProbe, cfg: ProbeConfig, d_model: int, path_dir: str | Path,
                    extra: dict | None = None) -> Path:
    """Write ``path_dir/model.safetensors`` and ``path_dir/config.json``; returns ``path_dir``.

    ``extra`` must be JSON-serialisable (epoch, metrics, backbone name, ...); its
    ``temperature`` and ``validity_threshold`` are applied by ``load_checkpoint``.
    """
    path = Path(path_dir)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / WEIGHTS), metadata={"format": "spanuq-probe", "version": str(FORMAT_VERSION)})
    meta = {"format_version": FORMAT_VERSION, "d_model": int(d_model), "probe": cfg.model_dump(),
            "extra": extra or {}}
    (path / CONFIG).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return path


def load_checkpoint(path_dir: str | Path, device: str | torch.device = "cpu") -> tuple[SpanUQProbe, dict]:
    """(model in eval mode, metadata dict with ``probe``, ``d_model``, ``extra``)."""
    path = Path(path_dir)
    meta = json.loads((path / CONFIG).read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported checkpoint format {meta.get('format_version')!r}")
    cfg = ProbeConfig.model_validate(meta["probe"])
    model = SpanUQProbe(cfg, meta["d_model"])
    model.load_state_dict(load_file(str(path / WEIGHTS), device=str(device)), strict=True)
    apply_calibration(model, meta.get("extra", {}))
    return model.to(device).eval(), meta


def apply_calibration(model: SpanUQProbe, extra: dict) -> SpanUQProbe:
    """Attach what was fitted on dev after training: the temperature T of û
    (``predict`` returns σ(logit(û)/T)) and the validity threshold of kept spans."""
    model.temperature = float(extra.get("temperature") or 1.0)
    model.validity_threshold = float(extra.get("validity_threshold") or 0.5)
    return model
