"""The sweep as a user runs it: a real Prefect server, process workers, `prefect deploy`,
`prefect deployment run sweep/smollm2-135m`; PostgreSQL shared by two workers; a killed
sweep resumed; optuna-dashboard and the MLflow UI over loopback. Slow: minutes each."""
import json
import os
import signal
import sys
import time

import mlflow
import optuna
import pytest
from optuna.trial import TrialState

from servers import BIN, cli, free_port, mlflow_server, process, prefect_server, wait_http
from sweep_data import REPO, write_sweep_file, write_synthetic_run

pytestmark = pytest.mark.slow
# every flow run clones the repository at HEAD (prefect.yaml's pull steps) and reuses this environment
ENV = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_DISABLE_TELEMETRY": "true", "TOKENIZERS_PARALLELISM": "false",
       "SPANUQ_REUSE_VENV": sys.prefix}


def _deploy_and_run(env, tmp, params: dict, workers: dict[str, int]) -> tuple[float, str]:
    """Pool + deployments, one worker per entry {node: slots}, then `prefect deployment run --watch`."""
    cli([str(BIN / "prefect"), "work-pool", "create", "spanuq", "--type", "process"], env)
    cli([str(BIN / "prefect"), "--no-prompt", "deploy", "--all"], env, cwd=REPO)  # every deployment of prefect.yaml
    stack = []
    try:
        for node, slots in workers.items():
            # flow runs log at INFO (a user's default): `--watch` shows what the flow logs
            wenv = {**env, "SPANUQ_NODE": node, "SPANUQ_GPU_SLOTS": str(slots), "SPANUQ_SLOT_DIR": str(tmp / f"slots-{node}"),
                    "PREFECT_LOGGING_LEVEL": "INFO"}
            ctx = process([str(BIN / "prefect"), "worker", "start", "--pool", "spanuq", "--limit", "1"],
                          wenv, tmp / f"worker-{node}.log", cwd=REPO)
            ctx.__enter__()
            stack.append(ctx)
        t0 = time.perf_counter()
        out = cli([str(BIN / "prefect"), "deployment", "run", "sweep/smollm2-135m", "--watch",
                   "--params", json.dumps(params)], env, timeout=1200)
        (tmp / "watch.txt").write_text(out)
        assert "Completed" in out, out[-3000:]
        return time.perf_counter() - t0, out
    finally:
        for ctx in reversed(stack):  # workers before the server
            ctx.__exit__(None, None, None)


@pytest.fixture(scope="module")
def deployed_sweep(tmp_path_factory):
    """`prefect deployment run sweep/smollm2-135m`: a 2-configuration grid, 1 epoch, one worker."""
    tmp = tmp_path_factory.mktemp("deployed")
    write_synthetic_run(tmp / "data")
    spec = write_sweep_file(tmp / "sweep.yaml", {"train.lr": [1e-3, 1e-5]}, study="deployed")
    storage, tracking = f"sqlite:///{tmp / 'optuna.db'}", f"sqlite:///{tmp / 'mlflow.db'}"
    params = {"spec": str(spec), "storage": storage, "overrides": [
        f"paths.data={tmp / 'data'}", f"paths.cache={tmp / 'cache'}", f"mlflow.tracking_uri={tracking}",
        "train.joint_epochs=2"]}  # the sweep file says 1: the run's word wins
    with prefect_server(tmp / "prefect", ENV) as env:
        seconds, out = _deploy_and_run(env, tmp, params, {"w1": 2})
    print(f"\nsweep/smollm2-135m deployment run (2 trials, 2 epochs): {seconds:.1f} s")
    return tmp, storage, tracking, out


def test_deployment_run_sweep_finishes_two_trials_nested_under_one_parent(deployed_sweep):
    tmp, storage, tracking, out = deployed_sweep
    trials = optuna.load_study(study_name="deployed", storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    mlflow.set_tracking_uri(tracking)
    client = mlflow.MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("spanuq").experiment_id])
    parents = [r for r in runs if r.data.tags.get("stage") == "sweep"]
    children = [r for r in runs if r.data.tags.get("stage") == "sweep-trial"]
    assert len(parents) == 1 and len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    best = max(trials, key=lambda t: t.value)
    champion = client.get_model_version_by_alias("spanuq-smollm2-135m", "champion")
    assert champion.run_id == best.user_attrs["mlflow_run_id"]
    assert parents[0].data.metrics["robustness.best"] == pytest.approx(best.value)
    assert {r.data.params["train.joint_epochs"] for r in children} == {"2"}  # the run's override won
    assert "| Model | Best | Median | Worst | IQR" in out and "| smollm2-135m |" in out  # --watch shows the table


def test_optuna_dashboard_and_mlflow_ui_serve_the_sweep(deployed_sweep):
    tmp, storage, tracking, _ = deployed_sweep
    p1, p2 = free_port(), free_port()
    with process([str(BIN / "optuna-dashboard"), storage, "--host", "127.0.0.1", "--port", str(p1)],
                 ENV, tmp / "dashboard.log") as dash, \
         process([str(BIN / "mlflow"), "ui", "--backend-store-uri", tracking, "--host", "127.0.0.1",
                  "--port", str(p2), "--workers", "1"], ENV, tmp / "mlflow-ui.log", cwd=tmp) as ui:
        studies = json.loads(wait_http(f"http://127.0.0.1:{p1}/api/studies", 120, dash))
        assert [s["study_name"] for s in studies["study_summaries"]] == ["deployed"]
        assert b"<html" in wait_http(f"http://127.0.0.1:{p1}/dashboard", 30, dash).lower()
        assert b"mlflow" in wait_http(f"http://127.0.0.1:{p2}/", 120, ui).lower()
        model = json.loads(wait_http(
            f"http://127.0.0.1:{p2}/api/2.0/mlflow/registered-models/get?name=spanuq-smollm2-135m", 30, ui))
        assert [a["alias"] for a in model["registered_model"]["aliases"]] == ["champion"]


def test_two_workers_share_one_postgres_study_and_one_mlflow_server(tmp_path):
    """Two workers standing in for two machines with 2 virtual GPU slots each; 4 configurations."""
    pgserver = pytest.importorskip("pgserver")
    write_synthetic_run(tmp_path / "data", n=96)
    spec = write_sweep_file(tmp_path / "sweep.yaml", {"train.lr": [1e-3, 3e-4], "probe.n_queries": [8, 12]},
                            epochs=3, study="multi")
    pg = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    try:
        storage = pg.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        with mlflow_server(tmp_path / "mlflow", ENV) as tracking, prefect_server(tmp_path / "prefect", ENV) as env:
            params = {"spec": str(spec), "storage": storage, "runners": 2, "overrides": [
                f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}", f"mlflow.tracking_uri={tracking}"]}
            seconds, _ = _deploy_and_run(env, tmp_path, params, {"m1": 2, "m2": 2})
            print(f"\ntwo-worker sweep (4 trials, 3 epochs): {seconds:.1f} s")
            trials = optuna.load_study(study_name="multi", storage=storage).get_trials()
            mlflow.set_tracking_uri(tracking)
            client = mlflow.MlflowClient()
            runs = client.search_runs([client.get_experiment_by_name("spanuq").experiment_id])
    finally:
        pg.cleanup()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 4  # no configuration twice
    by_node: dict[str, list] = {}
    for t in trials:
        by_node.setdefault(t.user_attrs["node"], []).append(t)
    assert set(by_node) == {"m1", "m2"}, {n: len(ts) for n, ts in by_node.items()}
    for node, ts in by_node.items():  # within a machine, trials that overlapped held different devices
        assert {t.user_attrs["cuda_visible_devices"] for t in ts} <= {"0", "1"}
        for a in ts:
            for b in ts:
                if a.number < b.number and a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete:
                    assert a.user_attrs["cuda_visible_devices"] != b.user_attrs["cuda_visible_devices"], node
    children = [r for r in runs if r.data.tags.get("stage") == "sweep-trial"]
    parents = [r for r in runs if r.data.tags.get("stage") == "sweep"]
    assert len(parents) == 1 and len(children) == 4
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert {r.data.tags["node"] for r in children} == {"m1", "m2"}


def test_a_killed_sweep_resumes_without_rerunning_finished_trials(tmp_path):
    write_synthetic_run(tmp_path / "data")
    spec = write_sweep_file(tmp_path / "sweep.yaml", {"train.lr": [1e-3, 3e-4, 1e-4]}, epochs=2, study="resume")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    ov = [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
          f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    cmd = [sys.executable, "-m", "spanuq.sweep", str(spec), "--storage", storage, "--lanes", "1"]
    for o in ov:
        cmd += ["-o", o]
    with process(cmd, ENV, tmp_path / "sweep.log", cwd=REPO) as proc:
        deadline = time.monotonic() + 600
        second = tmp_path / "data" / "smollm2-135m" / "sweeps" / "resume" / "trial-0001.log"
        while True:  # one lane: the second trial's log appears once the first has finished
            if second.exists():
                states = [t.state for t in optuna.load_study(study_name="resume", storage=storage).get_trials()]
                assert states[:2] == [TrialState.COMPLETE, TrialState.RUNNING], states
                break
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "sweep.log").read_text()[-3000:]
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = optuna.load_study(study_name="resume", storage=storage).get_trials()
    done = next(t for t in before if t.state == TrialState.COMPLETE)
    killed = next(t for t in before if t.state == TrialState.RUNNING)

    from spanuq.sweep import run_sweep

    summary = run_sweep(spec, storage, ov, n_lanes=1)
    after = optuna.load_study(study_name="resume", storage=storage).get_trials()
    complete = [t for t in after if t.state == TrialState.COMPLETE]
    assert sorted(t.params["train.lr"] for t in complete) == [1e-4, 3e-4, 1e-3]  # each configuration once
    assert next(t for t in complete if t.params == done.params).number == done.number  # not re-run
    assert after[killed.number].state == TrialState.FAIL  # the killed trial ...
    retry = next(t for t in after if t.system_attrs.get("failed_trial") == killed.number)
    assert retry.state == TrialState.COMPLETE  # ... was retried once, with its configuration
    assert retry.params == killed.system_attrs["fixed_params"]
    assert summary["robustness"]["n_complete"] == 3
