"""One sweep trial, in its own process (``python -m spanuq.sweep.trial``).

The process sees one device (``CUDA_VISIBLE_DEVICES`` set by the runner from the slot
it holds), so a crash, a NaN loss or an out-of-memory kill ends this trial only.  It:

1. opens trial ``--trial-id`` of the study and reads its configuration (Optuna's
   ``suggest_categorical`` over the sweep's space: queued params come back as queued);
2. trains with `spanuq.train.loop.train_probe` on the backbone's extracted features, reporting
   the dev span AUROC of every epoch to Optuna, which may prune the trial;
3. evaluates the best epoch on dev and test with `spanuq.train.loop.evaluate_model` (the span
   metrics over every labelled span), saves the checkpoint (safetensors) and logs it all
   to an MLflow run nested under the sweep's parent run (the checkpoint as artifacts ``probe/``:
   the coordinator registers the best one from there, whichever machine trained it);
4. tells Optuna the dev AUROC (COMPLETE), PRUNED, or FAIL with the error.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from ..config import Config, load_config
from ..llm.presets import fused_layers
from ..pipeline.cpus import available_cpus
from ..pipeline.paths import StagePaths
from .spec import SweepSpec, load_spec, trial_overrides

log = logging.getLogger(__name__)


def features_dir(cfg: Config) -> Path:
    """The pipeline's features when they hold this config's layers, else the sweep's copy for them."""
    paths = StagePaths.from_config(cfg)
    layers = fused_layers(cfg)
    index = paths.features / "index.json"
    if index.exists() and json.loads(index.read_text())["meta"].get("layers") == layers:
        return paths.features
    tag = "L" + "-".join(map(str, layers))
    return paths.root / "sweep-features" / tag / cfg.backbone.name / "features"


def ensure_features(cfg: Config, progress: bool = False) -> Path:
    """Extract the features of ``cfg``'s layers if no folder holds them yet (the extract stage, in a process of
    its own: the coordinator keeps nothing on the GPU its trials train on)."""
    d = features_dir(cfg)
    if (d / "index.json").exists():
        return d
    from ..pipeline.child import run_in_child

    paths = StagePaths.from_config(cfg)
    sub = d.parent  # <root>/sweep-features/L../<backbone>
    sub.mkdir(parents=True, exist_ok=True)
    if not paths.generations.exists():
        raise FileNotFoundError(f"{paths.generations} does not exist: run the pipeline's generate stage first")
    # the labels name the sample and given answers the extract stage also reads (`label.sample_answers`)
    for src in (paths.generations, paths.labels):
        link = sub / src.name
        if src.exists() and not link.exists():
            link.symlink_to(src.resolve())
    variant = cfg.model_copy(update={"paths": cfg.paths.model_copy(update={"data": str(sub.parent)})})
    run_in_child("spanuq.features.stage:run_extract", variant, {"progress": progress})
    return d


def trial_config(spec: SweepSpec, params: dict[str, Any], overrides: list[str] = ()) -> Config:
    """The trial's config: the sweep's params file + preset, its fixed overrides, the trial's
    params, then the caller's overrides (which never name a searched key: `Sweep` refuses that)."""
    return load_config(spec.params, [*trial_overrides(spec, params), *overrides], spec.preset)


def _numbers(prefix: str, metrics: dict) -> dict[str, float]:
    from ..pipeline.tracking import flatten

    return {f"{prefix}.{k}": v for k, v in flatten(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def run_trial(spec: SweepSpec, storage_url: str, trial_id: int, out_dir: Path,
              parent_run_id: str | None = None, overrides: list[str] = (), progress: bool = False) -> str:
    """Run trial ``trial_id`` to its end; returns its final Optuna state name."""
    import optuna
    import torch

    from ..metrics.uq import metric_value
    from ..features.dataset import load_examples, training_examples
    from ..llm.loading import resolve_device
    from ..model.checkpoint import save_checkpoint
    from ..pipeline import tracking
    from ..train.loop import evaluate_model, train_probe, uncalibrated
    from .slots import node_name, visible_slots
    from .study import open_study

    study = open_study(spec, storage_url)
    study.get_trials(deepcopy=False)  # loads the trial into Optuna's storage cache of this process
    trial = optuna.Trial(study, trial_id)
    params = {k: trial.suggest_categorical(k, spec.optuna_choices(k)) for k in spec.space}
    device_env = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    trial.set_user_attr("node", node_name())
    trial.set_user_attr("cuda_visible_devices", device_env)
    out = Path(out_dir) / f"trial-{trial.number:04d}"
    out.mkdir(parents=True, exist_ok=True)
    state, value, error = "FAIL", None, None
    cfg = trial_config(spec, params, overrides)
    with tracking.start_run(cfg, run_name=f"trial-{trial.number}", parent_run_id=parent_run_id,
                            tags={"stage": "sweep-trial", "optuna.study": spec.study_name,
                                  "optuna.trial": str(trial.number), "node": node_name(),
                                  "cuda_visible_devices": device_env}) as run:
        (out / "mlflow_run_id").write_text(run.info.run_id)
        trial.set_user_attr("mlflow_run_id", run.info.run_id)
        try:
            tracking.log_config(cfg)
            feats, paths = features_dir(cfg), StagePaths.from_config(cfg)
            train, _ = training_examples(feats, paths.labels, cfg.train.given_kinds)
            dev = load_examples(feats, paths.labels, ("dev",))
            test = load_examples(feats, paths.labels, ("test",))
            if not train or not dev:
                raise ValueError(f"sweep needs train and dev answers in {paths.labels} (got {len(train)}, {len(dev)})")
            if cfg.train.num_threads is None:  # the machine's cores shared by its slots
                torch.set_num_threads(max(1, available_cpus() // len(visible_slots())))

            def on_epoch(epoch: int, row: dict) -> None:
                tracking.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch)
                loss = row.get("train_loss")
                if loss is not None and not math.isfinite(loss):
                    raise FloatingPointError(f"non-finite training loss {loss} at epoch {epoch}")
                if row.get("dev_auroc") is not None and math.isfinite(row["dev_auroc"]):
                    trial.report(float(row["dev_auroc"]), epoch)
                    if trial.should_prune():
                        raise optuna.TrialPruned(f"pruned at epoch {epoch} (dev AUROC {row['dev_auroc']:.3f})")

            model, info = train_probe(cfg, train, dev, progress, on_epoch=on_epoch)
            device = resolve_device(cfg.train.device)
            dev_m = evaluate_model(model, dev, cfg, device)
            test_m = evaluate_model(model, test, cfg, device) if test else None
            tracking.log_metrics({**_numbers("dev", dev_m), **(_numbers("test", test_m) if test_m else {}),
                                  "best_epoch": info["best_epoch"], "n_parameters": info["n_parameters"]})
            value = metric_value(dev_m, "span", "auroc")
            if value is None:
                raise ValueError("dev span AUROC is undefined (one class or constant scores): nothing to rank")
            ckpt = save_checkpoint(model, cfg.probe, train[0].h.shape[1], out / "probe", uncalibrated(cfg),
                                   extra={"backbone": cfg.backbone.name, "layers": fused_layers(cfg),
                                          "best_epoch": info["best_epoch"], "dev_auroc": value,
                                          "optuna_trial": trial.number, "params": params})
            tracking.log_artifacts(str(ckpt), "probe")
            trial.set_user_attr("checkpoint", str(ckpt.resolve()))  # on this machine; every machine: the URI
            trial.set_user_attr("checkpoint_uri", f"runs:/{run.info.run_id}/probe")
            trial.set_user_attr("overrides", trial_overrides(spec, params))
            trial.set_user_attr("test_auroc", metric_value(test_m, "span", "auroc") if test_m else None)
            trial.set_user_attr("best_epoch", info["best_epoch"])
            state = "COMPLETE"
        except optuna.TrialPruned as e:
            state, error = "PRUNED", str(e)
        except Exception as e:  # noqa: BLE001 - every failure is recorded, then the process exits non-zero
            error = f"{type(e).__name__}: {e}"
            import mlflow

            mlflow.set_tag("error", error[:5000])
            mlflow.log_text(traceback.format_exc(), "error.txt")
            trial.set_user_attr("error", error[:2000])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
    if state == "COMPLETE":
        study.tell(trial, value)
    else:
        trial.set_user_attr("pruned", error)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return state


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    ap = argparse.ArgumentParser(prog="python -m spanuq.sweep.trial", description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--trial-id", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--parent-run", default=None)
    ap.add_argument("-o", "--override", action="append", default=[])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        state = run_trial(load_spec(args.spec), args.storage, args.trial_id, Path(args.out),
                          args.parent_run, args.override)
    except Exception as e:  # noqa: BLE001
        print(f"trial {args.trial_id} failed: {type(e).__name__}: {e}", file=sys.stderr)
        traceback.print_exc()
        return 1
    print(f"trial {args.trial_id}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
