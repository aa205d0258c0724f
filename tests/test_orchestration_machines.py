"""A sweep over machines that share nothing but the network.

Two "machines", A and B: each its own `git clone` at its own absolute path, its own HOME,
caches (XDG_*, DVC cache), PREFECT_HOME and temp folder, its own Prefect worker (process
pool); no `data/` in common.  What they share is what machines share over a network: one
Prefect server, one PostgreSQL (pgserver) for the Optuna study, one `mlflow server` with
proxied artifacts, a DVC remote directory standing in for object storage, and the git
repository `origin.git`.  On A the user runs the pipeline (tiny: `dvc exp run -S ...`),
commits, pushes, deploys and runs `prefect deployment run sweep/smollm2-135m --param runners=2`;
B's worker picks up the runner.  Mid-trial, machine B is killed (every process of it): its trial
is retried once on A, nothing is lost; the best probe is registered from MLflow and loads on
the machine that did not train it.  The commands here are the ones docs/orchestration.md gives.

Each flow run clones the repository at the deployment's commit (prefect.yaml's pull steps);
installing an environment per clone takes minutes, so the workers set SPANUQ_REUSE_VENV to
this test's environment (flows/worker_install.sh then only checks it) — the code itself comes
from the clone, which the flow runs' logs show.  Slow (a pipeline run, then a sweep of 8 trials):
run it from a clean clone with an environment that has the orchestration extra,
`python -m pytest -m slow -s tests/test_orchestration_machines.py` (docs/orchestration.md, Tests).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from worktree import copy_worktree
from servers import QUIET, free_port, mlflow_server, process, prefect_server

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
BIN = Path(sys.executable).parent
BB = "smollm2-135m"
# the user's tiny pipeline run (docs/orchestration.md shows the same command)
PIPELINE_SETS = ["prompts.n_prompts=24", "prompts.grounded=0", "generate.n_samples=2", "generate.max_new_tokens=24",
                 "generate.sample_max_new_tokens=24", "generate.batch_size=8",
                 "prompts.split_fractions={train: 0.5, dev: 0.25, test: 0.25}"]
# the user's sweep file: 2 layer sets (one extracted by the pipeline, one by the sweep) x 4
SWEEP = {
    "backbone": BB, "study": "machines", "sampler": "grid", "seed": 0, "params": "params.yaml",
    "overrides": ["probe.d_proj=32", "probe.n_queries=8", "probe.n_heads=4", "probe.d_ffn=64", "probe.dropout=0.0",
                  "train.warmup_epochs=2", "train.joint_epochs=8", "train.patience=8", "train.batch_size=4",
                  "train.num_threads=1", "evaluate.bootstrap=0"],
    "space": {"backbone.layers": [[16, 18, 20], [14, 16, 18]], "train.lr": [3e-3, 1e-3, 3e-4, 1e-4]},
    "pruner": {"type": "none"}, "heartbeat_s": 2, "grace_s": 15, "max_retry": 1,
}
IDENTITY = {"GIT_AUTHOR_NAME": "spanuq test", "GIT_AUTHOR_EMAIL": "test@example.org",
            "GIT_COMMITTER_NAME": "spanuq test", "GIT_COMMITTER_EMAIL": "test@example.org"}


def run(args: list[str], env: dict, cwd: Path, timeout: float = 1800) -> str:
    r = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, args))} (in {cwd}) failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def make_origin(tmp: Path) -> Path:
    """`origin.git`: the project as committed here (the working tree's tracked and new files)."""
    stage = copy_worktree(REPO, tmp / "stage")
    env = {**os.environ, **IDENTITY}
    run(["git", "init", "-q", "-b", "main"], env, stage)
    run(["git", "add", "-A"], env, stage)
    run(["git", "commit", "-qm", "spanuq"], env, stage)
    run(["git", "clone", "-q", "--bare", stage, tmp / "origin.git"], env, tmp)
    shutil.rmtree(stage)
    return tmp / "origin.git"


class Machine:
    """A machine: its folder (home, temp, caches), its clone of the repository, its environment."""

    def __init__(self, tmp: Path, name: str, shared: dict[str, str]):
        self.name, self.root = name, tmp / f"machine-{name}"
        self.home, self.tmp = self.root / "home", self.root / "tmp"
        self.checkout = self.root / "src" / "spanuq"
        for d in (self.home, self.tmp, self.checkout.parent):
            d.mkdir(parents=True)
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("PREFECT_", "MLFLOW_", "SPANUQ_", "DVC_", "XDG_", "HF_", "VIRTUAL_ENV", "PYTHONPATH"))}
        self.env = {**keep, **QUIET, **IDENTITY, **shared,
                    "HOME": str(self.home), "TMPDIR": str(self.tmp), "XDG_CACHE_HOME": str(self.home / ".cache"),
                    "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_DATA_HOME": str(self.home / ".local/share"),
                    "PREFECT_HOME": str(self.home / ".prefect"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                    "SPANUQ_NODE": name, "SPANUQ_SLOT_DIR": str(self.root / "slots"),
                    "SPANUQ_REUSE_VENV": str(VENV), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "TOKENIZERS_PARALLELISM": "false", "DVC_NO_ANALYTICS": "1", "PREFECT_LOGGING_LEVEL": "INFO"}

    def __call__(self, *args, timeout: float = 1800, cwd: Path | None = None, **extra_env) -> str:
        return run(list(args), {**self.env, **extra_env}, cwd or self.checkout, timeout)

    def processes(self) -> list[int]:
        """Pids of every process of this machine (its environment names it)."""
        pids = []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and f"SPANUQ_NODE={self.name}\0".encode() in (p / "environ").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                continue
        return pids


def api(env: dict, path: str, body: dict | None = None):
    r = httpx.post(f"{env['PREFECT_API_URL']}{path}", json=body or {}, timeout=30)
    r.raise_for_status()
    return r.json()


def flow_runs(env: dict, flow: str) -> list[dict]:
    return api(env, "/flow_runs/filter", {"flows": {"name": {"any_": [flow]}}})


def logs(env: dict, flow_run_id: str) -> str:
    rows = api(env, "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "TIMESTAMP_ASC",
                                     "limit": 200})
    return "\n".join(r["message"] for r in rows)


def wait_for(what: str, check, timeout: float, poll: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s")


@pytest.mark.timeout(3600)  # a pipeline run, a sweep of 8 trials over two machines, a machine lost and rejoining
def test_a_sweep_over_two_machines_that_share_only_the_network(tmp_path):
    pgserver = pytest.importorskip("pgserver")
    t_start = time.perf_counter()
    origin = make_origin(tmp_path)
    remote = tmp_path / "dvc-remote"  # stands in for s3://bucket/spanuq
    pg = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    storage = pg.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
    base = {**os.environ, **QUIET, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    try:
        with mlflow_server(tmp_path / "mlflow", base) as tracking, prefect_server(tmp_path / "prefect", base) as srv:
            shared = {"PREFECT_API_URL": srv["PREFECT_API_URL"], "MLFLOW_TRACKING_URI": tracking,
                      "SPANUQ_OPTUNA_STORAGE": storage}
            a, b = Machine(tmp_path, "A", shared), Machine(tmp_path, "B", shared)

            # --- machine A: the pipeline run, versioned and pushed to git ---------------------
            a("git", "clone", "-q", origin, a.checkout, cwd=a.checkout.parent)
            a("dvc", "config", "--global", "cache.dir", a.home / ".cache" / "dvc")  # one DVC cache for the machine
            a("dvc", "remote", "add", "-d", "storage", remote)
            sets = [arg for s in PIPELINE_SETS for arg in ("-S", s)]
            t0 = time.perf_counter()
            a("dvc", "exp", "run", "extract", *sets, PYTHONPATH=str(a.checkout))
            pipeline_s = time.perf_counter() - t0
            (a.checkout / "sweeps" / f"{BB}.yaml").write_text(yaml.safe_dump(SWEEP, sort_keys=False))
            a("git", "add", ".dvc/config", "params.yaml", "dvc.lock", f"sweeps/{BB}.yaml")
            a("git", "commit", "-qm", "tiny pipeline run, its sweep, the DVC remote")
            a("git", "push", "-q", "origin", "main")
            assert not list(remote.rglob("*.dir")), "nothing is pushed by hand: the coordinator flow pushes"

            # --- the deployments, recorded from A's commit ---------------------------------------
            a("prefect", "work-pool", "create", "spanuq", "--type", "process")
            a("prefect", "--no-prompt", "deploy", "--all", timeout=900)
            commit = a("git", "rev-parse", "HEAD").strip()
            dep = httpx.get(f"{srv['PREFECT_API_URL']}/deployments/name/sweep/{BB}", timeout=30).json()
            clone_step = dep["pull_steps"][0]["prefect.deployments.steps.git_clone"]
            assert clone_step["commit_sha"] == commit and clone_step["repository"] == str(origin)

            # --- the sweep: A's worker takes the coordinator run, B joins as the runner ----------
            b("git", "clone", "-q", origin, b.checkout, cwd=b.checkout.parent)
            b("dvc", "config", "--global", "cache.dir", b.home / ".cache" / "dvc")
            with process(["prefect", "worker", "start", "--pool", "spanuq", "--limit", "1"], a.env,
                         a.root / "worker.log", cwd=a.checkout):
                t0 = time.perf_counter()
                out = a("prefect", "deployment", "run", f"sweep/{BB}", "--param", "runners=2")
                coordinator_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
                wait_for("A's worker took the coordinator run", lambda: api(
                    srv, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [coordinator_id]}}})[0]["state_type"]
                    in ("RUNNING", "COMPLETED", "FAILED", "CRASHED"), 300)
                with process(["prefect", "worker", "start", "--pool", "spanuq", "--limit", "1"], b.env,
                             b.root / "worker.log", cwd=b.checkout):
                    running = lambda: _not_over(srv, coordinator_id)  # noqa: E731 - fail fast with its log
                    study = wait_for("the study", lambda: running() and _study(storage), 1800)
                    killed = wait_for("B ran a trial and is in the middle of its next one",
                                      lambda: running() and _mid_second_trial(study, "B"), 1800, poll=0.5)
                    pids = b.processes()
                    for pid in pids:  # the machine dies: worker, flow run, trial
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    assert study._storage.get_trial(killed._trial_id).state == TrialState.RUNNING
                state = wait_for("the coordinator run finished", lambda: _final(srv, coordinator_id), 2400, poll=5)
                sweep_s = time.perf_counter() - t0
                assert state == "COMPLETED", logs(srv, coordinator_id)[-6000:]

            coordinator_log = logs(srv, coordinator_id)
            runner = flow_runs(srv, "sweep-runner")
            assert len(runner) == 1
            runner_log = logs(srv, runner[0]["id"])

            # --- machine B back after the sweep: it joins the finished sweep (a machine can join any time),
            # pulls the data into a fresh clone and finds nothing left to run
            with process(["prefect", "worker", "start", "--pool", "spanuq", "--limit", "1"], b.env,
                         b.root / "worker-again.log", cwd=b.checkout):
                out = b("prefect", "deployment", "run", f"sweep-runner/{BB}")
                late_id = next(line.split()[-1] for line in out.splitlines() if "UUID" in line)
                assert wait_for("B's late runner", lambda: _final(srv, late_id), 900, poll=3) == "COMPLETED", \
                    logs(srv, late_id)[-4000:]
            late_log = logs(srv, late_id)

            # every configuration once, in one study; B's killed trial retried once, on A
            trials = optuna.load_study(study_name="machines", storage=storage).get_trials()
            complete = [t for t in trials if t.state == TrialState.COMPLETE]
            grid = {json.dumps(p, sort_keys=True) for p in _grid()}
            assert sorted(json.dumps(t.params, sort_keys=True) for t in complete) == sorted(grid)
            dead = trials[killed.number]
            assert dead.state == TrialState.FAIL and dead.user_attrs["node"] == "B"
            retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
            assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].user_attrs["node"] == "A"
            nodes = {t.user_attrs["node"] for t in complete}
            assert nodes == {"A", "B"}, nodes  # both machines ran trials

            # one MLflow parent run; every trial's run under it
            import mlflow

            mlflow.set_tracking_uri(tracking)
            client = mlflow.MlflowClient()
            runs = client.search_runs([client.get_experiment_by_name("spanuq").experiment_id])
            parents = [r for r in runs if r.data.tags.get("stage") == "sweep"]
            children = [r for r in runs if r.data.tags.get("stage") == "sweep-trial"]
            assert len(parents) == 1 and len(children) == len(trials)
            assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
            # artifacts went through the server (proxied), not to a path the machines happen to share
            assert all(r.info.artifact_uri.startswith("mlflow-artifacts:") for r in [*parents, *children])

            # the best probe, registered from the artifact store, loads on the machine that did not train it
            best = max(complete, key=lambda t: t.value)
            champion = client.get_model_version_by_alias(f"spanuq-{BB}", "champion")
            assert champion.run_id == best.user_attrs["mlflow_run_id"]
            other = b if best.user_attrs["node"] == "A" else a
            scored = json.loads(other(sys.executable, "-c", LOAD_AND_SCORE, PYTHONPATH=str(other.checkout)).splitlines()[-1])
            trained = Path(mlflow.artifacts.download_artifacts(run_id=best.user_attrs["mlflow_run_id"], artifact_path="probe",
                                                                dst_path=str(tmp_path / "best-probe")))
            from spanuq.pipeline.files import sha256_file

            assert f"probe models:/spanuq-{BB}@champion" in scored["probe_source"], scored
            assert f"sha256 {sha256_file(trained / 'model.safetensors')[:12]}" in scored["probe_source"], scored
            assert scored["n_spans"] >= 1 and all(0.0 <= u <= 1.0 for u in scored["u"])

            # the code came from each flow run's clone, under its machine's own temp folder
            assert f"spanuq from {a.tmp}" in coordinator_log, coordinator_log[:3000]
            assert f"spanuq from {b.tmp}" in runner_log, runner_log[:3000]
            assert f"(commit {commit})" in runner_log
            # the data: pushed by the coordinator flow, pulled by the runner, dvc status -c clean on both
            pushed = _number(coordinator_log, "sweep data pushed to DVC remote storage")
            pulled = _number(runner_log, "the sweep's data on B: pulled from DVC")
            assert pushed > 0 and pulled > 0
            assert "dvc status -c of the sweep's inputs on A: clean" in coordinator_log
            assert "0 trials ran on B; dvc status -c of the sweep's inputs: clean" in late_log
            assert "pulled from DVC:" in late_log and f"spanuq from {b.tmp}" in late_log
            assert "marked Crashed" in coordinator_log  # the lost runner, once the study was done
            status = a("dvc", "status", "-c", "--json", f"data/{BB}/labels.jsonl", f"data/{BB}/generations.jsonl",
                       f"data/{BB}/features")
            assert json.loads(status.strip().splitlines()[-1]) == {}  # A's own pipeline outputs: all in the remote
            assert not (b.checkout / "data").exists()  # B's own checkout never had data
            on = {n: sum(t.user_attrs["node"] == n for t in complete) for n in "AB"}
            moved = [line for log in (coordinator_log, runner_log) for line in log.splitlines()
                     if line.startswith(("sweep data pushed to DVC", "the sweep's data on B"))]
            print(f"\npipeline on A {pipeline_s:.0f} s; sweep (8 trials, 2 machines, one killed) {sweep_s:.0f} s; "
                  f"whole test {time.perf_counter() - t_start:.0f} s; load {os.getloadavg()}; trials completed on "
                  f"A {on['A']}, on B {on['B']}\n" + "\n".join(moved))
    finally:
        pg.cleanup()


LOAD_AND_SCORE = """
import json
from spanuq import SpanUQ
uq = SpanUQ.load("models:/spanuq-smollm2-135m@champion")
r = uq.score("What is the capital of Australia?", "The capital of Australia is Sydney, a city on the east coast.")
print(json.dumps({"probe_source": uq.probe_source, "n_spans": len(r.spans), "u": [s.u for s in r.spans]}))
"""


def _grid() -> list[dict]:
    from spanuq.sweep.spec import SweepSpec

    return SweepSpec.model_validate(SWEEP).grid()


def _study(storage: str):
    try:
        return optuna.load_study(study_name="machines", storage=storage)
    except KeyError:
        return None


def _mid_second_trial(study, node: str):
    trials = study.get_trials(deepcopy=False)
    if not any(t.state == TrialState.COMPLETE and t.user_attrs.get("node") == node for t in trials):
        return None
    return next((t for t in trials if t.state == TrialState.RUNNING and t.user_attrs.get("node") == node
                 and t.intermediate_values), None)


def _final(env: dict, flow_run_id: str) -> str | None:
    state = api(env, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})[0]["state_type"]
    return state if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None


def _not_over(env: dict, flow_run_id: str) -> bool:
    state = _final(env, flow_run_id)
    assert state is None, f"the coordinator run ended ({state}) too early:\n{logs(env, flow_run_id)[-6000:]}"
    return True


def _number(log: str, prefix: str) -> int:
    line = next(line for line in log.splitlines() if line.startswith(prefix))
    return int(re.search(r": (\d+) files, ", line[len(prefix):]).group(1))


def _docker_works() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _docker_works(), reason="docker is not usable here (`docker info` fails: no daemon)")
@pytest.mark.timeout(3600)  # scripts/setup.sh inside the image builds llama.cpp
def test_the_worker_image_builds_and_meets_the_requirements_of_its_commit(tmp_path):
    """The Dockerfile of a Docker/Kubernetes pool: built, and its environment passes the worker check."""
    tag = f"spanuq-worker-test:{os.getpid()}"
    run(["docker", "build", "-t", tag, "."], dict(os.environ), REPO, timeout=3600)
    try:
        out = run(["docker", "run", "--rm", tag, "python", "-m", "spanuq.sweep.worker", "check"], dict(os.environ), tmp_path)
        assert "every requirement met" in out
        out = run(["docker", "run", "--rm", tag, "sh", "-c", "echo $SPANUQ_REUSE_VENV"], dict(os.environ), tmp_path)
        assert out.strip() == "/opt/spanuq/.venv"
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
