"""MLflow tracking behind a few functions the stages call (publishing the probe: `spanuq.score.registry`).

* ``start_run(cfg, run_name, tags)`` — a run in experiment ``cfg.mlflow.experiment`` of the
  tracking store ``cfg.mlflow.tracking_uri`` (else ``$MLFLOW_TRACKING_URI``, else
  ``sqlite:///mlflow.db`` in the working directory: the repo root under DVC). With a
  sqlite store the artifacts go to ``mlartifacts/`` beside the database file.
* ``log_config(cfg)`` — every param as a flat dotted key (``probe.d_proj``, ...), plus the
  whole resolved config as ``config.json``.
* ``log_metrics(metrics, step)`` / ``log_artifacts(path, artifact_path)``.

Nothing here reads or logs an API key: ``log_config`` logs the *name* of the environment
variable that holds a key (``label.judge.api_key_env``), never its value.
"""
from __future__ import annotations

import json
import logging
import math
import re
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..config import Config

log = logging.getLogger(__name__)

_MAX_PARAM_CHARS = 6000  # MLflow's limit on one param value (8000 on recent stores; stay below)


def tracking_uri(cfg: Config) -> str:
    return cfg.mlflow.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"


def _artifact_root(uri: str) -> str | None:
    """``mlartifacts/`` beside a sqlite database; None (MLflow's default) for other stores."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///"):])
    return (db.resolve().parent / "mlartifacts").as_uri()


def connect(cfg: Config) -> str:
    """Point mlflow at the configured store and experiment; returns the experiment id."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    exp = mlflow.get_experiment_by_name(cfg.mlflow.experiment)
    if exp is None:
        root = _artifact_root(uri)
        exp_id = mlflow.create_experiment(
            cfg.mlflow.experiment, artifact_location=f"{root}/{cfg.mlflow.experiment}" if root else None)
    else:
        exp_id = exp.experiment_id
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


@contextmanager
def start_run(cfg: Config, run_name: str, tags: dict[str, str] | None = None,
              parent_run_id: str | None = None) -> Iterator[Any]:
    """``with start_run(cfg, "train-smollm2-135m") as run:`` — an active MLflow run.

    Nested calls (a Prefect flow or an Optuna trial that already opened a run) become
    child runs of the active one; ``parent_run_id`` nests the run under a run of another
    process (a sweep's parent run, opened by its coordinator with `create_parent_run`).
    """
    import mlflow

    connect(cfg)
    base = {"backbone": cfg.backbone.name, "preset": cfg.preset}
    nested = mlflow.active_run() is not None
    with mlflow.start_run(run_name=run_name, tags={**base, **(tags or {})}, nested=nested,
                          parent_run_id=parent_run_id) as run:
        yield run


def create_parent_run(cfg: Config, run_name: str, tags: dict[str, str] | None = None) -> str:
    """A run left open for child runs started by other processes or machines; returns its id.

    Close it with ``end_run(run_id)`` when the last child has finished.
    """
    from mlflow import MlflowClient

    exp_id = connect(cfg)
    base = {"backbone": cfg.backbone.name, "preset": cfg.preset, "mlflow.runName": run_name}
    return MlflowClient().create_run(exp_id, run_name=run_name, tags={**base, **(tags or {})}).info.run_id


def end_run(run_id: str, status: str = "FINISHED") -> None:
    from mlflow import MlflowClient

    MlflowClient().set_terminated(run_id, status=status)


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{"probe": {"d_proj": 128}} → {"probe.d_proj": 128}; lists and None become JSON text."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) else json.dumps(v)
    return out


def log_config(cfg: Config) -> None:
    """Every param of the resolved config (presets excluded) + ``config.json``."""
    import mlflow

    tree = cfg.model_dump(mode="json", exclude={"presets"})
    params = {k: (str(v)[:_MAX_PARAM_CHARS]) for k, v in flatten(tree).items()}
    mlflow.log_params(params)
    mlflow.log_dict(tree, "config.json")


def metric_name(key: str) -> str:
    """A key MLflow accepts: ``sequence.auroc@0.3`` → ``sequence.auroc_at_0.3``."""
    return re.sub(r"[^\w\-. :/]", "_", key.replace("@", "_at_"))


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    """Finite numbers only (MLflow rejects None; NaN would poison comparisons)."""
    import mlflow

    clean = {metric_name(k): float(v) for k, v in metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    if clean:
        mlflow.log_metrics(clean, step=step)


def log_artifacts(path: str, artifact_path: str | None = None) -> None:
    import mlflow

    p = Path(path)
    if p.is_dir():
        mlflow.log_artifacts(str(p), artifact_path)
    elif p.exists():
        mlflow.log_artifact(str(p), artifact_path)
