"""Prefect flows of the hyper-parameter sweep: ``sweep/<backbone>`` and ``sweep-runner/<backbone>``.

    prefect deployment run sweep/qwen3-8b                       # one machine, all its GPUs
    prefect deployment run sweep/qwen3-8b --param runners=3     # + 2 runner flow runs for other workers

``sweep`` is the coordinator: it pulls what dvc.lock records of the sweep's inputs, runs
the pipeline's upstream stages if they are still missing (one machine only), extracts each
layer set, pushes the data to the DVC remote and opens the Optuna study and the MLflow parent
run (`spanuq.sweep.prepare`), starts ``runners - 1`` ``sweep-runner`` flow runs (picked up by
the other machines' workers), runs trials on its own machine's slots, waits for the runners,
then writes the robustness table and registers the best probe from the MLflow artifact store
(`spanuq.sweep.finish`).  A runner pulls exactly the coordinator's data (or refuses, creating
nothing) before its first trial (`spanuq.sweep.runner.join`).  Each trial is a Prefect task
holding a slot of the global concurrency limit ``gpu-<node>`` (sized to that machine's slots)
and a device from `spanuq.sweep.slots`; the training itself runs in a child process that
sees only that device.  Every flow run starts by logging where its code comes from (the
clone of prefect.yaml's pull steps) and checking its Python (`spanuq.sweep.worker`).
"""
from __future__ import annotations

import os
import time

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.artifacts import create_markdown_artifact
from prefect.deployments import run_deployment
from prefect.task_runners import ThreadPoolTaskRunner

from flows.pipeline import pipeline
from spanuq.sweep import Sweep, finish, prepare, run_one, spec_path
from spanuq.sweep.data import human
from spanuq.sweep.runner import data_status, fetch_inputs, join, upstream_stages
from spanuq.sweep.slots import hold_slot, node_name, visible_slots
from spanuq.sweep.study import unfinished
from spanuq.sweep.upstream import machine_cache
from spanuq.sweep.worker import check_environment


@task(name="prepare-sweep", cache_policy=NO_CACHE)
def prepare_task(sw: Sweep, runners: int) -> str:
    return prepare(sw, runners=runners)


def _this_machine() -> dict:
    """Log where this flow run's code and Python come from; fail at once if the Python lacks what it needs."""
    info = check_environment()
    get_run_logger().info("node %s: spanuq from %s (commit %s), python %s", node_name(), info["spanuq"],
                          info["commit"], info["python"])
    return {"node": node_name(), "spanuq": info["spanuq"], "commit": info["commit"]}


def _status_line(status: dict | None) -> str:
    if status is None:
        return "not moved by DVC"
    return "clean (every input is in the remote)" if not status else f"NOT clean: {status}"


@task(name="trial", cache_policy=NO_CACHE, task_run_name="trial@{limit}")
def trial_task(sw: Sweep, parent_run_id: str, limit: str) -> str | None:
    """Hold one slot of this machine, claim one queued configuration, train and evaluate it."""
    with concurrency(limit, occupy=1, strict=True), hold_slot() as device:
        return run_one(sw, parent_run_id, device)


@task(name="finish-sweep", cache_policy=NO_CACHE)
def finish_task(sw: Sweep, parent_run_id: str) -> dict:
    return finish(sw, parent_run_id)


def _sweep(backbone: str, spec: str | None, storage: str | None, overrides: list[str] | None,
           n_trials: int | None = None) -> Sweep:
    return Sweep.from_files(spec or spec_path(backbone), storage, overrides, n_trials)


def run_here(sw: Sweep, parent_run_id: str, poll_s: float = 2.0) -> int:
    """Keep every slot of this machine busy with trial tasks until the study has nothing left."""
    slots = visible_slots()
    limit = f"gpu-{node_name()}"
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(limit, len(slots))
    study = sw.study()
    in_flight, ran, exhausted = [], 0, False
    while in_flight or not exhausted:
        while not exhausted and len(in_flight) < len(slots):
            in_flight.append(trial_task.submit(sw, parent_run_id, limit))
        time.sleep(0.5)
        for fut in [f for f in in_flight if f.state.is_final()]:
            in_flight.remove(fut)
            if fut.result() is not None:
                ran += 1
            elif unfinished(study) == 0:
                exhausted = True
            else:
                time.sleep(poll_s)  # trials still running elsewhere: one may go stale and come back
    return ran


def _slots_env(slots: int | None) -> None:
    if slots:
        os.environ["SPANUQ_GPU_SLOTS"] = str(slots)


@flow(name="sweep", task_runner=ThreadPoolTaskRunner(max_workers=64), log_prints=True)
def sweep(backbone: str = "smollm2-135m", spec: str | None = None, storage: str | None = None,
          overrides: list[str] | None = None, runners: int = 1, slots: int | None = None,
          n_trials: int | None = None, upstream: bool = True) -> dict:
    """The sweep of ``sweeps/<backbone>.yaml``: study, trials on every runner's slots, best probe registered.

    storage: Optuna RDB URL (default $SPANUQ_OPTUNA_STORAGE or sqlite:///optuna.db; PostgreSQL
    when runners > 1); overrides: KEY=VALUE for every trial (e.g. mlflow.tracking_uri=...; they
    win over the sweep file's, and a key its space searches is refused); runners: machines
    taking part (this one + runners-1 `sweep-runner/<backbone>` flow runs); slots: trials at
    once on this machine (default: $SPANUQ_GPU_SLOTS or the visible GPUs); n_trials: run this
    many configurations instead of the sweep file's budget; upstream: when the backbone's
    generations/labels are missing, run the pipeline's stages first (the pipeline flow's cached
    tasks) — or, false, refuse.  Either way, a backbone that cannot run here is refused before
    anything is created, with the command that makes its data.
    """
    logger = get_run_logger()
    machine = _this_machine()
    _slots_env(slots)
    sw = _sweep(backbone, spec, storage, overrides, n_trials)
    fetched = fetch_inputs(sw)
    if fetched["targets"]:
        logger.info("pulled %s from DVC: %d files, %s from the remote (the rest from this machine's cache)",
                    " ".join(fetched["targets"]), fetched["pulled_files"], human(fetched["pulled_bytes"]))
    stages = upstream_stages(sw, upstream, runners)
    if stages:
        logger.info("the sweep's inputs are missing: running the pipeline's %s stages first", ", ".join(stages))
        # their per-item caches in the machine's checkout: a killed sweep resumes from them in its next clone
        pipeline(backbone=backbone, params=sw.spec.params, preset=sw.spec.preset,
                 overrides=[*sw.spec.overrides, *sw.overrides, *machine_cache(sw.base_config)], stages=stages)
    parent = prepare_task(sw, runners)
    manifest = sw.study().user_attrs["sweep_data"]
    if manifest["mode"] == "dvc":
        logger.info("sweep data pushed to DVC remote %s (%s): %d files, %s; the inputs: %s in %s", manifest["remote"],
                    manifest["remote_url"], manifest["pushed_files"], human(manifest["pushed_bytes"]),
                    human(manifest["size_bytes"]), ", ".join(i["path"] for i in manifest["inputs"]))
    remote = [run_deployment(f"sweep-runner/{backbone}", timeout=0, parameters={
        "backbone": backbone, "spec": spec, "storage": storage, "overrides": overrides or [],
        "parent_run_id": parent}) for _ in range(max(0, runners - 1))]
    ran = run_here(sw, parent)
    logger.info("%d trials ran on %s", ran, node_name())
    _wait_for_runners(remote, grace_s=sw.spec.grace_s + 60)
    summary = finish_task(sw, parent)
    status = data_status(sw, runner=False)
    logger.info("dvc status -c of the sweep's inputs on %s: %s", node_name(), _status_line(status))
    summary["data"] = {"mode": manifest["mode"], "pushed_files": manifest.get("pushed_files", 0),
                       "pushed_bytes": manifest.get("pushed_bytes", 0), "size_bytes": manifest.get("size_bytes"),
                       "pulled_files": fetched["pulled_files"], "pulled_bytes": fetched["pulled_bytes"],
                       "status_cloud": status}
    summary["machine"] = {**machine, "trials": ran}
    create_markdown_artifact(summary["robustness_table"], key=f"robustness-{sw.spec.study_name}",
                             description=f"dev span AUROC over the trials of {sw.spec.study_name}")
    logger.info("robustness of %s (dev span AUROC; data/%s/sweeps/%s/robustness.md); best trial %s (ran on %s):\n%s",
                sw.spec.study_name, backbone, sw.spec.study_name, summary.get("best_trial"), summary.get("best_node"),
                summary["robustness_table"])
    return summary


def _wait_for_runners(flow_runs: list, grace_s: float, poll_s: float = 2.0) -> None:
    """Wait for the runner flow runs; once the study has nothing left, one still not final after
    ``grace_s`` lost its machine (its trial was failed and retried elsewhere): marked Crashed."""
    from prefect.states import Cancelled, Crashed

    logger = get_run_logger()
    deadline = time.monotonic() + grace_s
    with get_client(sync_client=True) as client:
        pending = list(flow_runs)
        while pending:
            pending = [fr for fr in pending if not ((st := client.read_flow_run(fr.id).state) and st.is_final())]
            if pending and time.monotonic() > deadline:
                for fr in pending:
                    state = client.read_flow_run(fr.id).state
                    gone = state is not None and (state.is_running() or state.is_pending())
                    logger.warning("runner flow run %s is still %s %.0f s after the study finished: %s", fr.id,
                                   state.name if state else "unknown", grace_s,
                                   "its machine is gone (its trial was retried elsewhere); marked Crashed" if gone
                                   else "no worker picked it up; cancelled")
                    client.set_flow_run_state(fr.id, Crashed(message="lost machine: its trials were retried elsewhere")
                                              if gone else Cancelled(message="no worker took it before the sweep ended"),
                                              force=True)
                break
            time.sleep(poll_s)


@flow(name="sweep-runner", task_runner=ThreadPoolTaskRunner(max_workers=64), log_prints=True)
def sweep_runner(backbone: str = "smollm2-135m", spec: str | None = None, storage: str | None = None,
                 overrides: list[str] | None = None, parent_run_id: str | None = None, slots: int | None = None) -> dict:
    """Another machine's share of a running sweep: the coordinator's data pulled into this clone
    (or a refusal that creates nothing), then its slots pull trials of the same study."""
    logger = get_run_logger()
    machine = _this_machine()
    _slots_env(slots)
    sw = _sweep(backbone, spec, storage, overrides)
    parent, pulled = join(sw)
    if parent_run_id and parent_run_id != parent:
        raise ValueError(f"parent run {parent_run_id} is not the parent run {parent} of study {sw.spec.study_name}")
    logger.info("the sweep's data on %s: %s", node_name(), "pulled from DVC: %d files, %s from the remote (the rest "
                "from this machine's DVC cache)" % (pulled["pulled_files"], human(pulled["pulled_bytes"]))
                if pulled["mode"] == "dvc" else "seen on a shared path")
    ran = run_here(sw, parent)
    status = data_status(sw, runner=True)
    logger.info("%d trials ran on %s; dvc status -c of the sweep's inputs: %s", ran, node_name(), _status_line(status))
    return {"machine": {**machine, "trials": ran},
            "data": {"mode": pulled["mode"], "pulled_files": pulled["pulled_files"],
                     "pulled_bytes": pulled["pulled_bytes"], "status_cloud": status}}
