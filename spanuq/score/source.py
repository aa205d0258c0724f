"""Which probe scores: ``--model`` / ``SpanUQ.load(source)``, and the default when none is named.

    shipped                              the probe shipped in the package for the backbone (spanuq/probes/)
    DIR                                  a checkpoint folder (model.safetensors + config.json)
    models:/spanuq-<backbone>@champion   an MLflow model (also runs:/<id>/probe)
    (none)                               data/<backbone>/probe when a finished `dvc repro` trained it here,
                                         else the shipped probe

The default takes a probe trained here only when it is a *finished* stage output: the
``dvc.lock`` above it records it with the content it has now (DVC's directory hash, recomputed
here).  A probe that a running ``dvc repro`` is writing, one an interrupted run left half
written, or one edited since, is not picked up: the shipped probe scores and the reason is
said (`ProbeChoice.note`).  Name the folder to use it anyway.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .shipped import SHIPPED, shipped_dir
from .views import HOW_TO_CHOOSE


@dataclass(frozen=True)
class ProbeChoice:
    path: Path
    note: str | None = None  # why the default did not take the probe trained here


def _md5(path: Path) -> str:
    h = hashlib.md5()  # noqa: S324 - DVC's content hash, not a security measure
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dvc_dir_md5(path: Path) -> str:
    """DVC 3's hash of a directory output (``<md5>.dir`` in dvc.lock): the md5 of the JSON list of its
    files' md5 and relative paths, sorted by path."""
    files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    listing = [{"md5": _md5(p), "relpath": p.relative_to(path).as_posix()} for p in files]
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"  # noqa: S324


def finished_output(path: Path) -> tuple[bool, str]:
    """Whether ``path`` is a finished DVC stage output, and if not, why."""
    import yaml

    path = Path(path).resolve()
    root = next((d for d in path.parents if (d / "dvc.lock").is_file()), None)
    if root is None:
        return False, "no dvc.lock records it (was it trained outside `dvc repro`?)"
    rel = path.relative_to(root).as_posix()
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8")) or {}
    for name, stage in (lock.get("stages") or {}).items():
        for out in stage.get("outs") or []:
            if out.get("path") == rel:
                if out.get("md5") == dvc_dir_md5(path):
                    return True, f"stage {name} of {root / 'dvc.lock'}"
                return False, (f"it differs from what dvc.lock's stage {name} finished with (a `dvc repro` "
                               "still running, or interrupted?)")
    return False, f"{root / 'dvc.lock'} records no stage output {rel} (a `dvc repro` still running?)"


def default_probe(trained: Path, backbone: str) -> ProbeChoice:
    """``trained`` (data/<backbone>/probe) when a finished stage wrote it, else the shipped probe."""
    if not (trained / "config.json").exists():
        return ProbeChoice(shipped_dir(backbone))
    ok, why = finished_output(trained)
    if ok:
        return ProbeChoice(trained)
    return ProbeChoice(shipped_dir(backbone), f"{trained} is not taken: {why}; scoring with the shipped probe "
                                               f"(--model {trained} to use it anyway)")


def resolve_checkpoint(source: str | Path | None, cfg) -> Path:
    """The probe folder of ``source`` (`choose_probe`)."""
    return choose_probe(source, cfg).path


def choose_probe(source: str | Path | None, cfg) -> ProbeChoice:
    """A probe folder from a path, an MLflow model URI, ``"shipped"``, or None (`default_probe`)."""
    if source is None:
        from ..pipeline.paths import StagePaths

        return default_probe(StagePaths.from_config(cfg).probe, cfg.backbone.name)
    text = str(source)
    if text == SHIPPED:
        return ProbeChoice(shipped_dir(cfg.backbone.name))
    if text.startswith(("models:/", "runs:/")) or "://" in text:
        return ProbeChoice(_from_mlflow(text, cfg))
    path = Path(text)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a probe checkpoint (no config.json); {HOW_TO_CHOOSE}")
    return ProbeChoice(path)


def _from_mlflow(uri: str, cfg) -> Path:
    import mlflow
    import yaml

    from ..pipeline.tracking import tracking_uri

    mlflow.set_tracking_uri(tracking_uri(cfg))
    mlflow.set_registry_uri(tracking_uri(cfg))
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    mlmodel = yaml.safe_load((local / "MLmodel").read_text())
    art = mlmodel["flavors"]["python_function"].get("artifacts", {}).get("checkpoint")
    if not art:
        raise ValueError(f"{uri}: not a SpanUQ model (no `checkpoint` artifact)")
    return local / art["path"]
