"""The sweep's data on every machine (spanuq.sweep.data): the coordinator versions and pushes it
with DVC, a runner at the same dvc.lock pulls exactly it, and a runner whose labels differ
(another dvc.lock hash) or whose copy was edited is refused before it creates anything.

Real git and DVC (a local directory as the remote) in three checkouts of one small repository
whose dvc.yaml has the pipeline's stage names and output paths; the data is the synthetic run
of `sweep_data` (features + labels), recorded by `dvc commit` as a pipeline run records it."""
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pytest
import yaml

from spanuq.sweep import Sweep, prepare
from spanuq.sweep.data import DataRefused, lock_outs
from spanuq.sweep.runner import join
from spanuq.sweep.worker import requirements, unmet
from sweep_data import REPO, write_sweep_file, write_synthetic_run

BB = "data/smollm2-135m"
DVC_YAML = {"stages": {
    "generate": {"cmd": "spanuq generate", "outs": [f"{BB}/generations.jsonl"]},
    "label": {"cmd": "spanuq label", "deps": [f"{BB}/generations.jsonl"], "outs": [f"{BB}/labels.jsonl"]},
    "extract": {"cmd": "spanuq extract", "deps": [f"{BB}/generations.jsonl", f"{BB}/labels.jsonl"],
                "outs": [f"{BB}/features"]},
}}
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def sh(*args: str, cwd: Path) -> str:
    r = subprocess.run(list(args), cwd=cwd, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(args)}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r.stdout


def dvc(*args: str, cwd: Path) -> str:
    return sh(sys.executable, "-m", "dvc", *args, cwd=cwd)


def write_run(repo: Path, seed: int) -> None:
    """A pipeline run's outputs (labels, features; generations stand-in) recorded in dvc.lock."""
    write_synthetic_run(repo / "data", n=24, d=16, seed=seed)
    (repo / BB / "generations.jsonl").write_text(f'{{"seed": {seed}}}\n')
    dvc("commit", "-f", "generate", "label", "extract", cwd=repo)


@contextmanager
def inside(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if ".git" not in p.parts and ".dvc" not in p.parts}


@pytest.fixture
def coordinator(tmp_path):
    """The coordinator's checkout: its pipeline run committed (dvc.lock), a DVC remote in .dvc/config."""
    repo = tmp_path / "coordinator"
    repo.mkdir()
    shutil.copy(REPO / "params.yaml", repo / "params.yaml")
    (repo / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    (repo / ".gitignore").write_text("/data/\n")
    sh("git", "init", "-q", "-b", "main", cwd=repo)
    dvc("init", "-q", cwd=repo)
    dvc("remote", "add", "-d", "storage", str(tmp_path / "remote"), cwd=repo)
    (repo / "sweeps").mkdir()
    write_sweep_file(repo / "sweeps" / "smollm2-135m.yaml", {"train.lr": [1e-3, 1e-4]}, study="data-test")
    spec = yaml.safe_load((repo / "sweeps" / "smollm2-135m.yaml").read_text())
    (repo / "sweeps" / "smollm2-135m.yaml").write_text(yaml.safe_dump({**spec, "params": "params.yaml"}))
    write_run(repo, seed=0)
    sh("git", "add", "-A", cwd=repo)
    sh("git", "commit", "-qm", "a pipeline run", cwd=repo)
    return repo


def _sweep(tmp_path: Path) -> Sweep:
    return Sweep.from_files("sweeps/smollm2-135m.yaml", f"sqlite:///{tmp_path / 'optuna.db'}",
                            [f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"])


def test_a_runner_pulls_the_coordinators_data_and_one_with_other_labels_is_refused(coordinator, tmp_path):
    with inside(coordinator):
        parent = prepare(_sweep(tmp_path), runners=2)  # versions, pushes, opens the study and the parent run
    remote_files = [p for p in (tmp_path / "remote").rglob("*") if p.is_file()]
    assert remote_files, "the coordinator pushed nothing"

    # a runner at the coordinator's commit: nothing of the data in its checkout, then exactly the data
    runner = tmp_path / "runner"
    sh("git", "clone", "-q", str(coordinator), str(runner), cwd=tmp_path)
    assert not (runner / "data").exists()
    with inside(runner):
        got_parent, pulled = join(_sweep(tmp_path))
    assert got_parent == parent
    assert pulled["mode"] == "dvc" and pulled["pulled_files"] >= 3 and pulled["pulled_bytes"] > 0
    for rel in ("labels.jsonl", "features/index.json"):
        assert (runner / BB / rel).read_bytes() == (coordinator / BB / rel).read_bytes()
    assert not (runner / BB / "generations.jsonl").exists()  # a runner pulls what trials read, no more
    assert dvc("status", "-c", "--json", f"{BB}/labels.jsonl", f"{BB}/features", cwd=runner).strip() == "{}"

    # a runner whose labels differ from the coordinator's (its own pipeline run: another dvc.lock hash)
    other = tmp_path / "other"
    sh("git", "clone", "-q", str(coordinator), str(other), cwd=tmp_path)
    write_run(other, seed=1)
    theirs, ours = lock_outs(other)[f"{BB}/labels.jsonl"]["md5"], lock_outs(coordinator)[f"{BB}/labels.jsonl"]["md5"]
    assert theirs != ours
    before = tree(other)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs_before = len(mlflow.search_runs(search_all_experiments=True))
    with inside(other), pytest.raises(DataRefused) as refused:
        join(_sweep(tmp_path))
    message = str(refused.value)
    assert "labels of this machine differ from the coordinator's" in message
    assert theirs in message and ours in message and "Nothing was created" in message
    assert "git checkout" in message and f"dvc pull {BB}/labels.jsonl {BB}/features" in message  # the fix
    assert tree(other) == before  # nothing pulled, no folder made
    assert len(mlflow.search_runs(search_all_experiments=True)) == runs_before
    assert _sweep(tmp_path).study().get_trials() == []  # no trial claimed

    # a runner at the right commit whose copy of the labels was edited: refused, told how to restore it
    edited = tmp_path / "edited"
    sh("git", "clone", "-q", str(coordinator), str(edited), cwd=tmp_path)
    dvc("pull", f"{BB}/labels.jsonl", cwd=edited)
    with open(edited / BB / "labels.jsonl", "a") as f:
        f.write("\n")
    with inside(edited), pytest.raises(DataRefused, match=r"dvc checkout --force data/smollm2-135m/labels.jsonl"):
        join(_sweep(tmp_path))
    assert not (edited / BB / "features").exists()


def test_a_runner_refuses_a_sweep_whose_coordinator_has_not_started(coordinator, tmp_path):
    runner = tmp_path / "runner"
    sh("git", "clone", "-q", str(coordinator), str(runner), cwd=tmp_path)
    with inside(runner), pytest.raises(DataRefused, match="no study data-test"):
        join(_sweep(tmp_path))
    assert not (runner / "data").exists()


def test_the_worker_check_names_what_the_environment_lacks():
    reqs = requirements()
    assert any(r.startswith("prefect") for r in reqs) and any(r.startswith("torch") for r in reqs)
    assert unmet(reqs) == []  # this environment runs the tests
    assert unmet(["surely-not-installed-pkg>=1", "pytest<1"]) == [
        "surely-not-installed-pkg>=1 (installed: none)", f"pytest<1 (installed: {pytest.__version__})"]
