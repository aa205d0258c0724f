"""Prefect flows of the hyper-parameter sweep: ``sweep/<backbone>`` and ``sweep-runner/<backbone>``.

    prefect deployment run sweep/qwen3-8b                       # one machine, all its GPUs
    prefect deployment run sweep/qwen3-8b --param runners=3     # + 2 runner flow runs for other workers

``sweep`` is the coordinator: it opens the Optuna study and queues the grid
(`spanuq.sweep.prepare`), opens the MLflow parent run, starts ``runners - 1``
``sweep-runner`` flow runs (picked up by the other machines' workers), runs trials on its
own machine's slots, waits for the runners, then writes the robustness table and
registers the best probe (`spanuq.sweep.finish`).  Each trial is a Prefect task holding a
slot of the global concurrency limit ``gpu-<node>`` (sized to that machine's slots) and a
device from `spanuq.sweep.slots`; the training itself runs in a child process that sees
only that device.
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
from spanuq.sweep.runner import upstream_stages
from spanuq.sweep.slots import hold_slot, node_name, visible_slots
from spanuq.sweep.study import unfinished


@task(name="prepare-sweep", cache_policy=NO_CACHE)
def prepare_task(sw: Sweep) -> str:
    return prepare(sw)


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
    _slots_env(slots)
    sw = _sweep(backbone, spec, storage, overrides, n_trials)
    stages = upstream_stages(sw, upstream)
    if stages:
        logger.info("the sweep's inputs are missing: running the pipeline's %s stages first", ", ".join(stages))
        pipeline(backbone=backbone, params=sw.spec.params, preset=sw.spec.preset,
                 overrides=[*sw.spec.overrides, *sw.overrides], stages=stages)
    parent = prepare_task(sw)
    remote = [run_deployment(f"sweep-runner/{backbone}", timeout=0, parameters={
        "backbone": backbone, "spec": spec, "storage": storage, "overrides": overrides or [],
        "parent_run_id": parent}) for _ in range(max(0, runners - 1))]
    ran = run_here(sw, parent)
    logger.info("%d trials ran on %s", ran, node_name())
    with get_client(sync_client=True) as client:
        for fr in remote:
            while not (state := client.read_flow_run(fr.id).state) or not state.is_final():
                time.sleep(2)
    summary = finish_task(sw, parent)
    create_markdown_artifact(summary["robustness_table"], key=f"robustness-{sw.spec.study_name}",
                             description=f"dev span AUROC over the trials of {sw.spec.study_name}")
    logger.info("robustness of %s (dev span AUROC; data/%s/sweeps/%s/robustness.md); best trial %s:\n%s",
                sw.spec.study_name, backbone, sw.spec.study_name, summary.get("best_trial"),
                summary["robustness_table"])
    return summary


@flow(name="sweep-runner", task_runner=ThreadPoolTaskRunner(max_workers=64), log_prints=True)
def sweep_runner(backbone: str = "smollm2-135m", spec: str | None = None, storage: str | None = None,
                 overrides: list[str] | None = None, parent_run_id: str | None = None, slots: int | None = None) -> int:
    """Another machine's share of a running sweep: its slots pull trials of the same study."""
    _slots_env(slots)
    sw = _sweep(backbone, spec, storage, overrides)
    parent = parent_run_id or sw.study().user_attrs.get("mlflow_parent_run_id")
    if parent is None:
        raise ValueError(f"study {sw.spec.study_name} has no parent run: start it with `sweep/{backbone}`")
    return run_here(sw, parent)
