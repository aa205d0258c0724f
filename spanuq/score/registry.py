"""Publishing the probe: an MLflow pyfunc model in the registry, and its ``champion`` alias.

``log_probe(probe_dir, cfg, dev_auroc)`` logs a checkpoint as an MLflow "models from code"
pyfunc model (``mlflow_model.py`` + the safetensors folder, nothing pickled), registers it
as ``spanuq-<backbone>`` and moves the alias ``champion`` to the new version only if its dev
AUROC beats the current champion's (`promote_if_better`).  The train stage and the sweep
call it; ``SpanUQ.load("models:/spanuq-<backbone>@champion")`` reads it back.
``spanuq.score.shipped.import_shipped(cfg)`` (``spanuq registry import-shipped``) registers the
probe shipped in the package the same way.
"""
from __future__ import annotations

import logging
import math
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ..config import Config
from ..pipeline.files import read_json
from .windows import window_length

log = logging.getLogger(__name__)

CHAMPION = "champion"
DEV_AUROC_TAG = "dev_auroc"


def registered_name(cfg: Config) -> str:
    return f"spanuq-{cfg.backbone.name}"


def champion_auroc(client, name: str) -> tuple[int | None, float | None]:
    """(version, dev AUROC) of the current champion of ``name``; (None, None) if there is none."""
    from mlflow.exceptions import MlflowException

    try:
        mv = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None, None
    raw = (mv.tags or {}).get(DEV_AUROC_TAG)
    try:
        return int(mv.version), float(raw) if raw not in (None, "", "None") else None
    except ValueError:
        return int(mv.version), None


def promote_if_better(client, name: str, version: str, dev_auroc: float | None) -> bool:
    """Move ``@champion`` to ``version`` if its dev AUROC beats the champion's (strictly).

    A version without a defined dev AUROC never replaces a champion; the first version
    with one becomes champion when there is none.
    """
    current, best = champion_auroc(client, name)
    if dev_auroc is None or not math.isfinite(dev_auroc):
        return False
    if current is not None and best is not None and dev_auroc <= best:
        return False
    client.set_registered_model_alias(name, CHAMPION, version)
    return True


def _signature():
    """Only the predict-time params are declared (the input is a T×d matrix per response, see
    mlflow_model.py); without a declared params schema MLflow drops them."""
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec

    return ModelSignature(params=ParamSchema([
        ParamSpec("threshold", "double", -1.0),  # < 0: the validity threshold stored with the probe
        ParamSpec("calibrated", "boolean", True),
        ParamSpec("source", "string", "generated"),  # or "given": an answer the backbone did not write
    ]))


def _input_example(d_model: int) -> dict:
    """One answer of two tokens: its T×d states, their entropies and surprisals (mlflow_model.py has the
    contract), as the dict form `predict` takes: MLflow stores it as JSON; a DataFrame example makes
    MLflow compare its columns with a range, which pandas deprecates (Pandas4Warning)."""
    return {"h": [[0.0] * d_model, [0.0] * d_model], "entropy": [0.0, 0.0], "surprisal": [0.0, 0.0]}


def log_probe(probe_dir: str | Path, cfg: Config, dev_auroc: float | None) -> dict[str, Any]:
    """Log + register the probe in the active run; returns what the train report records."""
    import mlflow
    from mlflow import MlflowClient

    code = find_spec("spanuq.score.mlflow_model").origin  # the file itself: MLflow runs it when loading
    meta = read_json(Path(probe_dir) / "config.json")
    info = mlflow.pyfunc.log_model(
        name="probe",
        python_model=str(code),
        artifacts={"checkpoint": str(Path(probe_dir))},
        # the windows long answers are read in, as `SpanUQ` reads them (score/windows.py)
        model_config={"window_tokens": window_length(meta.get("extra") or {}, cfg.generate.max_new_tokens)},
        signature=_signature(),
        input_example=_input_example(int(meta["d_model"])),
        pip_requirements=["spanuq", "torch", "safetensors", "numpy", "pandas"],
    )
    name = registered_name(cfg)
    mv = mlflow.register_model(info.model_uri, name)
    client = MlflowClient()
    client.set_model_version_tag(name, mv.version, DEV_AUROC_TAG, "None" if dev_auroc is None else repr(float(dev_auroc)))
    promoted = promote_if_better(client, name, mv.version, dev_auroc)
    champ, champ_auroc = champion_auroc(client, name)
    log.info("registered %s v%s (dev AUROC %s); champion: v%s", name, mv.version, dev_auroc, champ)
    return {"registered_model": name, "model_version": int(mv.version), "promoted": promoted,
            "champion_version": champ, "champion_dev_auroc": champ_auroc}

