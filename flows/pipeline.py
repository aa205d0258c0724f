"""Prefect flow ``pipeline/<backbone>``: the DVC stages as Prefect tasks, one implementation.

Each task calls `spanuq.stages.run_stage` — the function `spanuq <stage>` runs under
``dvc repro``.  A task's cache key is the stage's inputs *as ``dvc.yaml`` declares them*:
the values of its ``params`` in the resolved config and the content hashes of its
``deps`` (data files and code), so a re-run skips every stage whose inputs did not
change, and a changed param re-runs that stage and what follows it.  A stage whose
outputs were deleted runs again whatever its key.

    prefect deployment run pipeline/smollm2-135m
    prefect deployment run pipeline/qwen3-8b --param preset=gpu-paper
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, get_run_logger, task
from prefect.context import TaskRunContext

from spanuq.config import Config, load_config
from spanuq.pipeline.files import sha256_tree
from spanuq.llm.judge_endpoint import preflight
from spanuq.pipeline.child import run_in_child
from spanuq.stages import STAGES

REPO = Path(__file__).resolve().parents[1]
DVC_YAML = REPO / "dvc.yaml"


def _lookup(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _resolve(path: str, cfg: Config) -> Path:
    """A dvc.yaml path (``data/${backbone.name}/labels.jsonl``) for this config's data folder."""
    path = re.sub(r"\$\{([^}]+)\}", lambda m: str(_lookup(cfg.model_dump(mode="json"), m.group(1))), path)
    if path == "data" or path.startswith("data/"):
        return Path(cfg.paths.data) / path[len("data/"):]
    return REPO / path


def _entries(items: list) -> list[str]:
    return [next(iter(i)) if isinstance(i, dict) else i for i in items or []]


def hash_path(p: Path) -> str:
    """Content hash of a file or of every file under a folder (`sha256_tree`); "missing" if absent."""
    return sha256_tree(p) if p.exists() else "missing"


def stage_inputs(name: str, cfg: Config) -> dict[str, Any]:
    """The stage's params and dependency hashes, read from ``dvc.yaml``."""
    stage = yaml.safe_load(DVC_YAML.read_text())["stages"][name]
    tree = cfg.model_dump(mode="json")
    return {"stage": name,
            "params": {k: _lookup(tree, k) for k in _entries(stage.get("params"))},
            "deps": {d: hash_path(_resolve(d, cfg)) for d in _entries(stage.get("deps"))}}


def stage_outputs(name: str, cfg: Config) -> list[Path]:
    stage = yaml.safe_load(DVC_YAML.read_text())["stages"][name]
    return [_resolve(o, cfg) for key in ("outs", "metrics") for o in _entries(stage.get(key))]


def stage_cache_key(context: TaskRunContext | None, parameters: dict[str, Any]) -> str:
    """Prefect cache key: the hash of the stage's inputs (its dvc.yaml params and deps)."""
    cfg = _config(parameters["params"], parameters["overrides"], parameters["preset"])
    return hashlib.sha256(json.dumps(stage_inputs(parameters["name"], cfg), sort_keys=True).encode()).hexdigest()


def _config(params: str, overrides: list[str], preset: str | None) -> Config:
    return load_config(params, overrides, preset)


@task(name="stage", task_run_name="{name}", cache_key_fn=stage_cache_key, cache_expiration=timedelta(days=365),
      persist_result=True)
def stage_task(name: str, params: str, overrides: list[str], preset: str | None, upstream: str | None = None) -> str:
    """The stage in a process of its own (`spanuq.pipeline.child`): a GPU stage's model, or vLLM's
    reservation, is gone from the cards when it ends, before the next stage loads."""
    return str(run_in_child(STAGES[name], _config(params, overrides, preset), {"progress": False}, capture=True))


@flow(name="pipeline", log_prints=True)
def pipeline(backbone: str = "smollm2-135m", params: str = "params.yaml", preset: str | None = None,
             overrides: list[str] | None = None, stages: list[str] | None = None) -> dict[str, str]:
    """prompts → generate → index → label → extract → train → evaluate for one backbone.

    stages: run only these (in pipeline order); the others must have run before.
    """
    logger = get_run_logger()
    ov = [*(overrides or []), f"backbone.name={backbone}"]
    if not stages or {"generate", "label"} & set(stages):
        preflight(_config(params, ov, preset))  # the judge, its corpus, the NLI model: fail now, not after generation
    out, upstream = {}, None
    for name in STAGES:
        if stages and name not in stages:
            continue
        missing = not all(p.exists() for p in stage_outputs(name, _config(params, ov, preset)))
        # outputs deleted (or never made here): run even when the inputs' key has a cached result
        upstream = stage_task.with_options(refresh_cache=missing)(name, params, ov, preset, upstream)
        out[name] = upstream
        logger.info("%s: %s", name, upstream)
    return out
