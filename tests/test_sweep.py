"""The sweep (paper App. C.3): spec → queued grid, trials claimed once, GPU slots, stale-trial
retry, and a real two-trial sweep on synthetic features where one configuration crashes."""
import json
import threading
import time

import mlflow
import optuna
import pytest
from optuna.trial import TrialState

from spanuq.config import load_config
from spanuq.sweep import Sweep, finish, prepare, run_lanes
from spanuq.sweep.slots import hold_slot
from spanuq.sweep.spec import SweepSpec, load_spec, trial_overrides
from spanuq.sweep.study import claim_trial, enqueue_grid, open_study, unfinished
from sweep_data import REPO, write_sweep_file, write_synthetic_run


def _spec(**kw) -> SweepSpec:
    return SweepSpec(backbone="smollm2-135m", params=str(REPO / "params.yaml"), heartbeat_s=1, grace_s=2,
                     space={"probe.d_proj": [256, 512], "train.lr": [5e-5, 1e-4, 2e-4],
                            "backbone.layers": [[16, 18, 20], [18, 20, 22]]}, **kw)


def test_every_preset_has_a_sweep_file_and_the_paper_space():
    for name in ("smollm2-135m", "qwen3-14b", "qwen3-8b", "qwen3-4b", "qwen3-30b-a3b", "mistral-7b"):
        spec = load_spec(REPO / "sweeps" / f"{name}.yaml")
        assert spec.backbone == name
        load_config(REPO / spec.params, spec.overrides, spec.preset)  # the fixed overrides are valid keys
    paper = load_spec(REPO / "sweeps" / "qwen3-14b.yaml")
    assert paper.space["probe.d_proj"] == [256, 512] and paper.space["train.lr"] == [5e-5, 1e-4, 2e-4]
    assert 24 <= len(paper.grid()) <= 28


def test_a_trial_config_is_the_grid_point_as_overrides(tmp_path):
    spec = _spec(n_trials=5)
    grid = spec.grid()
    assert len(grid) == 5 and len({json.dumps(g, sort_keys=True) for g in grid}) == 5
    assert spec.grid() == grid  # seeded: every machine enumerates the same subset
    point = {"probe.d_proj": 256, "train.lr": 1e-4, "backbone.layers": "[18, 20, 22]"}
    cfg = load_config(spec.params, trial_overrides(spec, point))
    assert (cfg.probe.d_proj, cfg.train.lr, cfg.backbone.layers) == (256, 1e-4, [18, 20, 22])
    bad = tmp_path / "tpe.yaml"
    bad.write_text(json.dumps(spec.model_dump() | {"sampler": "tpe", "n_trials": None}))
    with pytest.raises(ValueError, match="n_trials"):
        load_spec(bad)


def test_workers_never_claim_the_same_configuration(tmp_path):
    spec = _spec()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = open_study(spec, url)
    assert enqueue_grid(study, spec) == 12
    assert enqueue_grid(study, spec) == 0  # a resumed coordinator queues nothing twice
    claimed: dict[str, list] = {"a": [], "b": [], "c": [], "d": []}

    def worker(name):
        s = open_study(spec, url)  # its own connection, as on another machine
        while (tid := claim_trial(s, spec)) is not None:
            claimed[name].append(tid)
            s.tell(s._storage.get_trial(tid).number, 0.5)

    threads = [threading.Thread(target=worker, args=(n,)) for n in claimed]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ids = [i for got in claimed.values() for i in got]
    assert len(ids) == len(set(ids)) == 12
    params = [json.dumps(t.system_attrs["fixed_params"], sort_keys=True) for t in study.get_trials()]
    assert len(set(params)) == 12 and unfinished(study) == 0


def test_slots_are_distinct_while_held_and_wait_when_all_are_busy(tmp_path):
    seen, lock = [], threading.Lock()
    held = threading.Barrier(2)

    def trial():
        with hold_slot(["0", "1"], tmp_path) as dev:
            with lock:
                seen.append(dev)
            held.wait(timeout=10)  # both hold a slot at the same moment
            time.sleep(0.2)

    threads = [threading.Thread(target=trial) for _ in range(2)]
    [t.start() for t in threads]
    time.sleep(0.05)
    with pytest.raises(TimeoutError):
        with hold_slot(["0", "1"], tmp_path, poll_s=0.05, timeout_s=0.1):
            pass
    [t.join() for t in threads]
    assert sorted(seen) == ["0", "1"]
    with hold_slot(["0", "1"], tmp_path, timeout_s=1) as dev:  # released again
        assert dev == "0"


def test_a_trial_whose_process_vanished_is_failed_and_retried_once(tmp_path):
    spec = _spec(n_trials=1, max_retry=1)
    study = open_study(spec, f"sqlite:///{tmp_path / 'optuna.db'}")
    enqueue_grid(study, spec)
    first = claim_trial(study, spec)
    study._storage.record_heartbeat(first)  # ... then the machine dies: no more heartbeats
    assert claim_trial(study, spec) is None  # still within the grace period
    time.sleep(spec.grace_s + 1)
    retry = claim_trial(study, spec)  # stale → FAIL, re-queued once, claimed here
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL and retry == trials[1]._trial_id
    assert trials[1].system_attrs["fixed_params"] == trials[0].system_attrs["fixed_params"]
    study._storage.record_heartbeat(retry)
    time.sleep(spec.grace_s + 1)
    assert claim_trial(study, spec) is None  # the retry went stale too: not retried again
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.FAIL]


def test_sweep_runs_trials_in_processes_and_survives_a_crashing_configuration(tmp_path):
    """Two configurations, 1 epoch: d_proj=30 cannot split over 4 heads and raises in the trial."""
    write_synthetic_run(tmp_path / "data")
    spec = write_sweep_file(tmp_path / "sweep.yaml", {"probe.d_proj": [32, 30]})
    sw = Sweep.from_files(spec, f"sqlite:///{tmp_path / 'optuna.db'}", [
        f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", "mlflow.experiment=sweep-test"])
    parent = prepare(sw)
    assert run_lanes(sw, parent, n_lanes=1) == 2
    summary = finish(sw, parent)

    trials = {t.params["probe.d_proj"]: t for t in sw.study().get_trials()}
    ok, bad = trials[32], trials[30]
    assert ok.state == TrialState.COMPLETE and 0 <= ok.value <= 1
    assert bad.state == TrialState.FAIL and "divisible" in bad.user_attrs["error"]
    runs = {r.data.tags["optuna.trial"]: r for r in mlflow.MlflowClient().search_runs(
        [mlflow.get_experiment_by_name("sweep-test").experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'")}
    assert runs[str(ok.number)].info.status == "FINISHED" and "dev.span.auroc.value" in runs[str(ok.number)].data.metrics
    assert runs[str(bad.number)].info.status == "FAILED" and "divisible" in runs[str(bad.number)].data.tags["error"]
    assert summary["robustness"]["n_complete"] == 1 and summary["robustness"]["n_failed"] == 1
    assert summary["best_trial"] == ok.number and summary["registry"]["champion_version"] == 1
    mv = mlflow.MlflowClient().get_model_version_by_alias("spanuq-smollm2-135m", "champion")
    assert mv.run_id == ok.user_attrs["mlflow_run_id"]
    assert (sw.out_dir / "robustness.md").read_text().startswith("| Model | Best | Median | Worst | IQR")
    assert mlflow.MlflowClient().get_run(parent).info.status == "FINISHED"


def test_a_trial_process_killed_like_by_the_oom_killer_is_failed_with_its_exit_status(tmp_path):
    import os
    import signal

    import psutil

    from spanuq.sweep import run_one

    write_synthetic_run(tmp_path / "data")
    spec = write_sweep_file(tmp_path / "sweep.yaml", {"train.lr": [1e-3]}, epochs=50, study="killed")
    sw = Sweep.from_files(spec, f"sqlite:///{tmp_path / 'optuna.db'}", [
        f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"])
    parent = prepare(sw)
    result = []

    def run():
        try:
            result.append(run_one(sw, parent, ""))
        except Exception as e:  # noqa: BLE001 - shown by the assertion below
            result.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 300
    while True:  # kill the trial process once its MLflow run exists (it is training)
        kids = [p for p in psutil.Process().children() if "spanuq.sweep.trial" in " ".join(p.cmdline())]
        if kids and list(sw.out_dir.glob("trial-*/mlflow_run_id")):
            os.kill(kids[0].pid, signal.SIGKILL)
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    runner.join()
    (trial,) = sw.study().get_trials()
    assert result == ["FAIL"] and trial.state == TrialState.FAIL
    assert "exited with status -9" in trial.user_attrs["error"]
    run = mlflow.MlflowClient().get_run((sw.out_dir / "trial-0000" / "mlflow_run_id").read_text())
    assert run.info.status == "FAILED" and "status -9" in run.data.tags["error"]
