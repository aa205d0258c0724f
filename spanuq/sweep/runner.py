"""Driving a sweep: prepare the study, run trials on the slots of this machine, finish.

    sw = Sweep.from_files("sweeps/smollm2-135m.yaml")
    fetch_inputs(sw)                     # the labelled generations from DVC, when dvc.lock has them
    parent = prepare(sw, runners=2)      # features, data pushed, study + queued grid + MLflow parent run
    run_lanes(sw, parent)                # this machine's slots pull trials until none is left
    summary = finish(sw, parent)         # robustness table, best probe registered, parent run closed

    # on another machine, in its own clone:
    parent, pulled = join(sw)            # the coordinator's data pulled (or a refusal), the parent run
    run_lanes(sw, parent)

Every machine of a multi-machine sweep runs ``run_lanes`` against the same storage and
parent run; only the coordinator runs ``prepare`` and ``finish``; the data moves as
`spanuq.sweep.data` describes.  The Prefect flows in ``flows/sweep.py`` call exactly these
functions (each trial a Prefect task).
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager

import optuna
from optuna.trial import TrialState

from ..config import Config, load_config
from ..pipeline.child import code_env
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from .data import (MANIFEST_ATTR, DataRefused, check_shareable, fetch_for_coordinator, final_status, human,
                   join as join_data, publish)
from .slots import hold_slot, node_name, visible_slots
from .spec import SweepSpec, encode, load_spec
from .study import PARENT_RUN_ATTR, claim_trial, enqueue_grid, open_study, trial_by_id, unfinished
from .upstream import UpstreamMissing, check_upstream, missing_inputs

log = logging.getLogger(__name__)


def default_storage() -> str:
    """``$SPANUQ_OPTUNA_STORAGE`` (e.g. a PostgreSQL URL shared by machines), else ``sqlite:///optuna.db``."""
    return os.environ.get("SPANUQ_OPTUNA_STORAGE") or "sqlite:///optuna.db"


@dataclass
class Sweep:
    spec: SweepSpec
    spec_path: Path
    storage: str = field(default_factory=default_storage)
    overrides: list[str] = field(default_factory=list)  # e.g. paths.data=..., mlflow.tracking_uri=...

    def __post_init__(self) -> None:
        searched = [o for o in self.overrides if o.split("=", 1)[0].strip() in self.spec.space]
        if searched:
            raise ValueError(f"{', '.join(searched)}: the sweep searches {'these keys' if len(searched) > 1 else 'this key'} "
                             f"({self.spec_path.name}'s space); narrow the space in the sweep file instead of "
                             "overriding it for every trial")

    @classmethod
    def from_files(cls, spec_path: str | Path, storage: str | None = None, overrides: list[str] | None = None,
                   n_trials: int | None = None) -> "Sweep":
        """The sweep of ``spec_path``; the caller's ``overrides`` win over the file's (a key the
        space searches is refused), ``n_trials`` (if given) over its budget."""
        spec = load_spec(spec_path)
        if n_trials is not None:
            if n_trials < 1:
                raise ValueError(f"n_trials must be >= 1, got {n_trials}")
            spec = spec.model_copy(update={"n_trials": n_trials})
        return cls(spec, Path(spec_path).resolve(), storage or default_storage(), list(overrides or []))

    @property
    def base_config(self) -> Config:
        """The params file + preset, the sweep file's overrides, then the caller's (the caller's word wins)."""
        return load_config(self.spec.params, [*self.spec.overrides, *self.overrides], self.spec.preset)

    @property
    def out_dir(self) -> Path:
        """``data/<backbone>/sweeps/<study>/``: trial checkpoints and logs, the robustness table."""
        return StagePaths.from_config(self.base_config).root / "sweeps" / self.spec.study_name

    def study(self):
        return open_study(self.spec, self.storage)


def layer_configs(sw: Sweep) -> list[Config]:
    """One trial config per layer set the space names (each needs its own extracted features)."""
    from .trial import trial_config

    return [trial_config(sw.spec, {} if layers is None else {"backbone.layers": encode(layers)}, sw.overrides)
            for layers in sw.spec.space.get("backbone.layers", [None])]


def upstream_stages(sw: Sweep, run_upstream: bool = True, runners: int = 1) -> list[str]:
    """The pipeline stages to run before this sweep can start (`spanuq.sweep.upstream`); raises
    `UpstreamMissing` — before anything is created — when its inputs cannot be made here, or
    `spanuq.sweep.data.DataRefused` when other machines could not pull what they would make."""
    stages = check_upstream(sw.base_config, f"the sweep {sw.spec.study_name}", run_upstream, layer_configs(sw))
    if stages:
        check_shareable(sw.base_config, runners)
    return stages


def fetch_inputs(sw: Sweep) -> dict[str, Any]:
    """The coordinator's first step: what dvc.lock records of the sweep's inputs, pulled from DVC into
    this checkout (`spanuq.sweep.data.fetch_for_coordinator`); returns what came from the remote."""
    return fetch_for_coordinator(sw.base_config, layer_configs(sw))


def prepare(sw: Sweep, progress: bool = False, runners: int = 1) -> str:
    """Create (or reopen) the study, queue the grid, extract missing layer sets, publish the data
    (`spanuq.sweep.data.publish`: pushed to the DVC remote); returns the parent run id.

    Its inputs (the pipeline's generations and labels) must exist: `upstream_stages` says what to run first.
    With ``runners`` > 1 they must be what dvc.lock records (or seen by every machine): refused otherwise,
    before anything is created."""
    from ..pipeline import tracking
    from .trial import ensure_features

    configs = layer_configs(sw)
    missing = missing_inputs(sw.base_config, configs)
    if missing:
        raise UpstreamMissing(f"the sweep {sw.spec.study_name} trains on {' and '.join(map(str, missing))}, not made "
                              "yet: run the pipeline's upstream stages first (`upstream_stages`)")
    check_shareable(sw.base_config, runners)
    for cfg in configs:  # each layer set the space names needs its features
        ensure_features(cfg, progress=progress)
    manifest = publish(sw.base_config, configs, runners)
    if manifest["mode"] == "dvc":
        log.info("sweep data pushed to DVC remote %s (%s): %d files, %s (of %s in the inputs)", manifest["remote"],
                 manifest["remote_url"], manifest["pushed_files"], human(manifest["pushed_bytes"]),
                 human(manifest["size_bytes"]))
    study = sw.study()
    if sw.spec.sampler == "grid":
        added = enqueue_grid(study, sw.spec)
        log.info("queued %d configurations in study %s", added, sw.spec.study_name)
    study.set_user_attr(MANIFEST_ATTR, manifest)
    parent = study.user_attrs.get(PARENT_RUN_ATTR)
    if parent is None:
        cfg = sw.base_config
        parent = tracking.create_parent_run(cfg, f"sweep-{sw.spec.study_name}", tags={
            "stage": "sweep", "optuna.study": sw.spec.study_name, "optuna.storage": _safe_url(sw.storage)})
        from mlflow import MlflowClient

        MlflowClient().log_dict(parent, sw.spec.model_dump(mode="json"), "sweep.json")
        study.set_user_attr(PARENT_RUN_ATTR, parent)
    from mlflow import MlflowClient

    tracking.connect(sw.base_config)
    MlflowClient().log_dict(parent, manifest, "sweep-data.json")
    return parent


def join(sw: Sweep) -> tuple[str, dict[str, Any]]:
    """A runner's first step: the coordinator's study, its data in this checkout (pulled from DVC and
    checked against the manifest, or `spanuq.sweep.data.DataRefused` before anything is created);
    returns (parent run id, what was pulled)."""
    try:
        study = open_study(sw.spec, sw.storage, create=False)
    except KeyError:
        raise DataRefused(f"no study {sw.spec.study_name} in {_safe_url(sw.storage)}: start the sweep with its "
                               f"coordinator (`prefect deployment run sweep/{sw.spec.backbone}`), whose runners join "
                               "it. Nothing was created.") from None
    pulled = join_data(sw.base_config, study.user_attrs.get(MANIFEST_ATTR), sw.spec.study_name)
    parent = study.user_attrs.get(PARENT_RUN_ATTR)
    if parent is None:
        raise DataRefused(f"study {sw.spec.study_name} has no parent run: start it with `sweep/{sw.spec.backbone}`")
    return parent, pulled


def data_status(sw: Sweep, runner: bool) -> dict[str, str] | None:
    """``dvc status -c`` of the sweep's inputs in this checkout ({} = clean; None when DVC does not move them)."""
    return final_status(sw.study().user_attrs.get(MANIFEST_ATTR), runner)


def _safe_url(url: str) -> str:
    """A storage URL without its password (it never reaches MLflow)."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _die_with_parent() -> None:
    """Child side of the pipe: SIGKILL when the thread that started it dies (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_one(sw: Sweep, parent_run_id: str | None, device: str, study=None) -> str | None:
    """Claim one trial and run it in a child process on ``device``; None when nothing was claimable.

    The child reports its own end to Optuna and MLflow.  If it vanished without doing so
    (killed, out of memory, segfault), the trial is failed here with its exit status
    and log tail, and its MLflow run is marked FAILED.
    """
    study = study or sw.study()
    trial_id = claim_trial(study, sw.spec)
    if trial_id is None:
        return None
    storage = study._storage
    storage.record_heartbeat(trial_id)
    out = sw.out_dir
    out.mkdir(parents=True, exist_ok=True)
    number = trial_by_id(study, trial_id).number
    log_path = out / f"trial-{number:04d}.log"
    cmd = [sys.executable, "-m", "spanuq.sweep.trial", "--spec", str(sw.spec_path), "--storage", sw.storage,
           "--trial-id", str(trial_id), "--out", str(out)]
    if parent_run_id:
        cmd += ["--parent-run", parent_run_id]
    for o in sw.overrides:
        cmd += ["-o", o]
    # the trial imports the code this process runs (the flow run's clone), not the environment's copy
    env = code_env(CUDA_VISIBLE_DEVICES=device)
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        while True:  # heartbeat for as long as the child lives
            try:
                proc.wait(timeout=sw.spec.heartbeat_s)
                break
            except subprocess.TimeoutExpired:
                storage.record_heartbeat(trial_id)
    ft = trial_by_id(study, trial_id)
    if ft.state == TrialState.RUNNING:
        tail = log_path.read_text(errors="replace")[-1500:]
        error = f"trial process exited with status {proc.returncode} without reporting: {tail}"
        storage.set_trial_user_attr(trial_id, "error", error[:2000])
        try:  # the storage directly: no sampler hooks for a trial whose process is gone
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass
        run_file = out / f"trial-{number:04d}" / "mlflow_run_id"
        if run_file.exists():
            _fail_run(sw, run_file.read_text().strip(), error)
        ft = trial_by_id(study, trial_id)
    log.info("trial %d on %s [%s]: %s", number, node_name(), device, ft.state.name)
    return ft.state.name


def _fail_run(sw: Sweep, run_id: str, error: str) -> None:
    from mlflow import MlflowClient

    from ..pipeline import tracking

    tracking.connect(sw.base_config)
    client = MlflowClient()
    client.set_tag(run_id, "error", error[:5000])
    client.set_terminated(run_id, status="FAILED")


def lane(sw: Sweep, parent_run_id: str | None, guard: Callable[[], ContextManager] = nullcontext,
         slots: list[str] | None = None, poll_s: float = 2.0, on_trial: Callable[[str], None] | None = None) -> int:
    """One slot's loop: hold a slot, run a trial, repeat until the study has nothing left; returns trials run."""
    study = sw.study()
    n = 0
    while True:
        with guard(), hold_slot(slots) as device:
            state = run_one(sw, parent_run_id, device, study)
        if state is not None:
            n += 1
            if on_trial:
                on_trial(state)
            continue
        if unfinished(study) == 0:
            return n
        time.sleep(poll_s)  # others' trials still running: one may go stale and be re-queued


def run_lanes(sw: Sweep, parent_run_id: str | None, n_lanes: int | None = None,
              guard: Callable[[], ContextManager] = nullcontext) -> int:
    """Run trials on ``n_lanes`` slots of this machine at once (default: every visible slot)."""
    slots = visible_slots()
    n_lanes = n_lanes or len(slots)
    counts: list[int] = []
    errors: list[BaseException] = []

    def go():
        try:
            counts.append(lane(sw, parent_run_id, guard, slots))
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=go, name=f"lane-{i}") for i in range(n_lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts)


def robustness(study) -> dict[str, Any]:
    """Best / median / worst dev AUROC and IQR over the sweep's finished trials (paper App. robustness)."""
    import numpy as np

    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    vals = np.array([t.value for t in done], dtype=float)
    row: dict[str, Any] = {"n_complete": len(done),
                           "n_pruned": sum(t.state == TrialState.PRUNED for t in trials),
                           "n_failed": sum(t.state == TrialState.FAIL for t in trials)}
    if len(vals):
        q25, q75 = np.percentile(vals, [25, 75])
        row.update(best=float(vals.max()), median=float(np.median(vals)), worst=float(vals.min()), iqr=float(q75 - q25))
    else:
        row.update(best=None, median=None, worst=None, iqr=None)
    row["trials"] = [{"number": t.number, "state": t.state.name, "dev_auroc": t.value,
                      "test_auroc": t.user_attrs.get("test_auroc"), "params": t.params,
                      "node": t.user_attrs.get("node"), "cuda_visible_devices": t.user_attrs.get("cuda_visible_devices"),
                      "error": t.user_attrs.get("error")} for t in trials]
    return row


def robustness_markdown(backbone: str, r: dict[str, Any]) -> str:
    f = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    return ("| Model | Best | Median | Worst | IQR | trials (complete / pruned / failed) |\n|---|---|---|---|---|---|\n"
            f"| {backbone} | {f(r['best'])} | {f(r['median'])} | {f(r['worst'])} | {f(r['iqr'])} | "
            f"{r['n_complete']} / {r['n_pruned']} / {r['n_failed']} |\n")


def finish(sw: Sweep, parent_run_id: str) -> dict[str, Any]:
    """Write the robustness table, register the best trial's probe, close the parent run."""
    import mlflow

    from ..pipeline import tracking
    from ..score.registry import log_probe
    from .trial import trial_config

    study = sw.study()
    r = robustness(study)
    out = sw.out_dir
    write_json(out / "robustness.json", r)
    (out / "robustness.md").write_text(robustness_markdown(sw.spec.backbone, r))
    cfg = sw.base_config
    tracking.connect(cfg)
    client = mlflow.MlflowClient()
    for k in ("best", "median", "worst", "iqr", "n_complete", "n_pruned", "n_failed"):
        if r[k] is not None:
            client.log_metric(parent_run_id, f"robustness.{k}", float(r[k]))
    client.log_artifact(parent_run_id, str(out / "robustness.json"))
    client.log_artifact(parent_run_id, str(out / "robustness.md"))
    summary: dict[str, Any] = {"study": sw.spec.study_name, "parent_run_id": parent_run_id,
                               "robustness": {k: v for k, v in r.items() if k != "trials"},
                               "robustness_table": robustness_markdown(sw.spec.backbone, r)}
    if r["n_complete"]:
        best = study.best_trial
        summary.update(best_trial=best.number, best_dev_auroc=best.value, best_params=best.params)
        best_cfg = trial_config(sw.spec, best.params, sw.overrides)
        if best_cfg.mlflow.register_model and study.user_attrs.get("registered_trial") != best.number:
            with tempfile.TemporaryDirectory() as tmp, mlflow.start_run(run_id=best.user_attrs["mlflow_run_id"]):
                # from the artifact store: the best trial may have run on another machine
                probe = mlflow.artifacts.download_artifacts(run_id=best.user_attrs["mlflow_run_id"],
                                                            artifact_path="probe", dst_path=tmp)
                reg = log_probe(probe, best_cfg, dev_auroc=best.value)
            summary["best_node"] = best.user_attrs.get("node")
            study.set_user_attr("registered_trial", best.number)
            client.set_tag(parent_run_id, "best_trial", str(best.number))
            summary["registry"] = reg
    write_json(out / "summary.json", summary)
    tracking.end_run(parent_run_id)
    return summary


def run_sweep(spec_path: str | Path, storage: str | None = None, overrides: list[str] | None = None,
              n_lanes: int | None = None, n_trials: int | None = None, run_upstream: bool = True,
              progress: bool = False) -> dict[str, Any]:
    """The whole sweep on this machine, without Prefect (``python -m spanuq.sweep``): the
    pipeline's upstream stages first when their outputs are missing, then the trials."""
    from ..stages import run_stage

    sw = Sweep.from_files(spec_path, storage, overrides, n_trials)
    fetch_inputs(sw)
    for name in upstream_stages(sw, run_upstream):
        log.info("sweep %s: running the pipeline's %s stage first", sw.spec.study_name, name)
        run_stage(name, sw.base_config, progress=progress)
    parent = prepare(sw)
    run_lanes(sw, parent, n_lanes)
    return finish(sw, parent)
