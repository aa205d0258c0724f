"""Probe checkpoints: ``model.safetensors`` (weights) + ``config.json`` (ProbeConfig, d_model,
the dev-fitted `Calibration`, extras; ``members`` for a `ProbeEnsemble`).

No pickle anywhere: weights go through ``safetensors.torch`` and metadata through JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..config import ProbeConfig
from .calibration import Calibration
from .ensemble import ProbeEnsemble
from .probe import SpanUQProbe

FORMAT_VERSION = 2  # 2: the calibration has its own entry (1 kept temperature and threshold in ``extra``)
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


@dataclass
class Checkpoint:
    """A loaded probe with what it was trained and calibrated with."""

    probe: SpanUQProbe | ProbeEnsemble  # in eval mode
    calibration: Calibration
    d_model: int
    extra: dict = field(default_factory=dict)  # JSON-safe facts: backbone, layers, system prompt, best epoch, ...


def save_checkpoint(model: SpanUQProbe | ProbeEnsemble, cfg: ProbeConfig, d_model: int, path_dir: str | Path,
                    calibration: Calibration | None = None, extra: dict | None = None) -> Path:
    """Write ``path_dir/model.safetensors`` and ``path_dir/config.json``; returns ``path_dir``.

    ``calibration``: what the train stage fitted on dev (default: none, T = 1 and threshold 0.5);
    ``extra`` must be JSON-serialisable (epoch, metrics, backbone name, ...).
    """
    path = Path(path_dir)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    (path / WEIGHTS).write_bytes(stable_safetensors(state, {"format": "spanuq-probe", "version": str(FORMAT_VERSION)}))
    meta = {"format_version": FORMAT_VERSION, "d_model": int(d_model), "probe": cfg.model_dump(),
            "calibration": (calibration or Calibration()).as_dict(), "extra": extra or {}}
    if isinstance(model, ProbeEnsemble):  # its weights are members.<m>.<name>
        meta["members"] = len(model.members)
    (path / CONFIG).write_text(json.dumps(meta, indent=2, sort_keys=True))
    return path


def save_calibration(path_dir: str | Path, calibration: Calibration) -> Path:
    """Replace the calibration in ``path_dir/config.json``, the weights file untouched (its bytes and
    sha256 stay: benchmarks name what they scored by it)."""
    path = Path(path_dir) / CONFIG
    meta = json.loads(path.read_text())
    meta["calibration"] = calibration.as_dict()
    path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return Path(path_dir)


def stable_safetensors(state: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """The safetensors file of ``state`` with its header's metadata in sorted order.  The library writes the
    metadata from a hash map, in an order that changes from process to process, so two saves of one state
    differed in bytes (and DVC saw a new probe); the header is rewritten with the same content, sorted, in
    the same length (the rest is padding the format allows)."""
    from safetensors.torch import save

    data = save(state, metadata=metadata)
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8: 8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    if len(text) > n:
        raise ValueError(f"safetensors header of {n} bytes rewritten as {len(text)}: not the same content")
    return data[:8] + text + b" " * (n - len(text)) + data[8 + n:]


def same_weights(a: str | Path, b: str | Path) -> bool:
    """Whether two weight files hold the same tensors (files saved before `stable_safetensors` may list
    their header's metadata in another order)."""
    x, y = load_file(str(a)), load_file(str(b))
    return x.keys() == y.keys() and all(x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)


def calibration_sha256(path_dir: str | Path) -> str:
    """sha256 of the checkpoint's calibration (canonical JSON): with the weights' sha256 it names
    what a benchmark scored, since `spanuq recalibrate` changes scores without touching the weights."""
    import hashlib

    meta = json.loads((Path(path_dir) / CONFIG).read_text())
    return hashlib.sha256(json.dumps(meta.get("calibration"), sort_keys=True).encode()).hexdigest()


def load_checkpoint(path_dir: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """The probe (in eval mode on ``device``), its calibration and its facts."""
    path = Path(path_dir)
    meta = json.loads((path / CONFIG).read_text())
    version = meta.get("format_version")
    if version == 1:  # before the calibration had its own entry
        old = meta.get("extra", {})
        meta["calibration"] = {"temperature": old.get("temperature") or 1.0,
                               "validity_threshold": old.get("validity_threshold") or 0.5}
    elif version != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported checkpoint format {version!r}")
    cfg = ProbeConfig.model_validate(meta["probe"])
    n = int(meta.get("members", 1))
    model = SpanUQProbe(cfg, meta["d_model"]) if n == 1 else \
        ProbeEnsemble([SpanUQProbe(cfg, meta["d_model"]) for _ in range(n)])
    model.load_state_dict(load_file(str(path / WEIGHTS), device=str(device)), strict=True)
    return Checkpoint(model.to(device).eval(), Calibration.from_dict(meta["calibration"]), int(meta["d_model"]),
                      meta.get("extra", {}))
