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


def _cmdline(proc) -> str:
    """A process's command line; "" for one that vanished, is a zombie or is not ours to read."""
    import psutil

    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


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
        kids = [p for p in psutil.Process().children() if "spanuq.sweep.trial" in _cmdline(p)]
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


def test_the_callers_overrides_win_over_the_sweep_file_and_a_searched_key_is_refused(tmp_path):
    spec = REPO / "sweeps" / "smollm2-135m.yaml"
    file_says = load_spec(spec).overrides
    assert any(o.startswith("train.warmup_epochs=") for o in file_says)  # the file sets it ...
    sw = Sweep.from_files(spec, f"sqlite:///{tmp_path / 'o.db'}", ["train.warmup_epochs=2", "train.joint_epochs=1"])
    assert sw.base_config.train.warmup_epochs == 2 and sw.base_config.train.joint_epochs == 1  # ... the caller wins
    from spanuq.sweep.trial import trial_config

    point = sw.spec.grid()[0]
    cfg = trial_config(sw.spec, point, sw.overrides)
    assert cfg.train.warmup_epochs == 2 and cfg.train.joint_epochs == 1
    searched = next(iter(sw.spec.space))
    with pytest.raises(ValueError, match=f"{searched}.*the sweep searches"):
        Sweep.from_files(spec, None, [f"{searched}=1"])
    assert len(Sweep.from_files(spec, None, [], n_trials=2).spec.grid()) == 2  # the budget from the command line


def test_a_sweep_of_a_backbone_that_cannot_run_here_refuses_up_front_and_leaves_nothing(tmp_path):
    """`sweep/qwen3-8b` on a machine without its pipeline run, its weights or a GPU."""
    import subprocess
    import sys

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "SPANUQ_MODELS": str(tmp_path / "models")}
    r = subprocess.run([sys.executable, "-m", "spanuq.sweep", str(REPO / "sweeps" / "qwen3-8b.yaml"),
                        "--storage", storage, "-o", f"paths.data={tmp_path / 'data'}",
                        "-o", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert r.returncode == 2, r.stderr
    err = r.stderr
    assert "generations.jsonl" in err and "labels.jsonl" in err and "qwen3-8b cannot run on this machine" in err
    assert "Qwen/Qwen3-8B" in err and "prefect deployment run pipeline/qwen3-8b --param preset=gpu-paper" in err
    assert "Nothing was created" in err
    assert optuna.study.get_all_study_summaries(storage) == []  # no empty study ...
    assert not (tmp_path / "data").exists()  # ... no symlink, no feature folder
    assert not (tmp_path / "mlflow.db").exists()  # ... no MLflow run


def test_a_sweep_with_no_pipeline_run_makes_its_data_first_then_runs_its_trials(tmp_path):
    """One command from nothing: the pipeline's upstream stages run (prompts → label, the same
    `run_stage` calls as `dvc repro`), then the trial trains on what they made."""
    from spanuq.sweep import run_sweep

    spec = write_sweep_file(tmp_path / "sweep.yaml", {"train.lr": [1e-3]}, study="from-nothing")
    storage, tracking = f"sqlite:///{tmp_path / 'optuna.db'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    summary = run_sweep(spec, storage, [
        f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}", f"mlflow.tracking_uri={tracking}",
        "prompts.n_prompts=10", "prompts.grounded=0", "generate.backend=hf", "generate.n_samples=2", "generate.max_new_tokens=32",
        "generate.sample_max_new_tokens=32"])
    root = tmp_path / "data" / "smollm2-135m"
    assert (root / "generations.jsonl").exists() and (root / "labels.jsonl").exists()
    assert (root / "sweep-features").exists() or (root / "features").exists()
    (trial,) = optuna.load_study(study_name="from-nothing", storage=storage).get_trials()
    # 10 answers are enough to train on; whether 2 dev answers hold both classes to rank is luck
    assert trial.state == TrialState.COMPLETE or "dev span AUROC is undefined" in trial.user_attrs["error"], trial.user_attrs
    assert "| smollm2-135m |" in summary["robustness_table"]
    run = mlflow.MlflowClient(tracking).get_run(trial.user_attrs["mlflow_run_id"])
    assert run.data.tags["mlflow.parentRunId"] == summary["parent_run_id"]
