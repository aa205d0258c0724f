"""prefect.yaml as Prefect reads it, and the two scripts its steps run (fast: no server).

* every step names a real Prefect step function with arguments it takes;
* sweep deployments clone the deployed commit, pipeline deployments work in the machine's checkout;
* `flows/deploy_source.sh` (build step): origin's URL once HEAD is pushed, else the checkout's path;
* `flows/worker_install.sh` (pull step): with SPANUQ_REUSE_VENV it installs nothing and checks."""
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org"}


def _steps(prefect_yaml: dict) -> list[tuple[str, dict]]:
    steps = [*prefect_yaml["build"], *prefect_yaml["pull"]]
    for d in prefect_yaml["deployments"]:
        steps += d.get("pull") or []
    return [next(iter(s.items())) for s in steps]


def test_every_step_is_a_prefect_step_called_with_arguments_it_takes():
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    for name, inputs in _steps(spec):
        module, func = name.rsplit(".", 1)
        fn = getattr(importlib.import_module(module), func)
        params = inspect.signature(fn).parameters
        assert set(inputs) - {"id", "requires"} <= set(params), (name, set(inputs) - set(params))
    ids = {inputs.get("id") for _, inputs in _steps(spec)}
    assert {"commit", "repository", "clone"} <= ids  # the templates below refer to them
    clone = spec["pull"][0]["prefect.deployments.steps.git_clone"]
    assert clone == {"id": "clone", "repository": "{{ repository.stdout }}", "commit_sha": "{{ commit.stdout }}"}
    assert spec["pull"][1]["prefect.deployments.steps.run_shell_script"]["directory"] == "{{ clone.directory }}"
    for d in spec["deployments"]:
        assert (REPO / d["entrypoint"].split(":")[0]).exists()
        if d["entrypoint"].startswith("flows/pipeline.py"):
            assert d["pull"] == [{"prefect.deployments.steps.set_working_directory":
                                  {"directory": "{{ $SPANUQ_CHECKOUT }}"}}]
        else:
            assert "pull" not in d  # the sweep flows run in a clone of the deployed commit


def _git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **IDENTITY})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _deploy_source(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "flows/deploy_source.sh")], cwd=cwd, capture_output=True, text=True)


def test_the_deployment_records_origin_once_head_is_pushed_else_the_checkout(tmp_path):
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    _git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    _git("clone", "-q", str(origin), str(work), cwd=tmp_path)
    (work / "f.txt").write_text("1\n")
    _git("add", "f.txt", cwd=work)
    _git("commit", "-qm", "one", cwd=work)
    r = _deploy_source(work)  # committed, not pushed: workers could not fetch it from origin
    assert r.returncode == 0 and r.stdout.strip() == str(work) and "on no branch of a remote" in r.stderr
    _git("push", "-q", "origin", "HEAD:main", cwd=work)
    r = _deploy_source(work)
    assert r.stdout.strip() == str(origin) and r.stderr == ""
    (work / "f.txt").write_text("2\n")  # an edit the workers will not get
    r = _deploy_source(work)
    assert r.stdout.strip() == str(origin) and "uncommitted changes are not deployed" in r.stderr and "f.txt" in r.stderr


def test_the_install_step_reuses_a_named_environment_and_checks_it(tmp_path):
    env = {**os.environ, "SPANUQ_REUSE_VENV": sys.prefix}
    r = subprocess.run(["bash", "flows/worker_install.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"reusing the environment {sys.prefix} (nothing installed)" in r.stdout
    assert f"code {REPO / 'spanuq' / '__init__.py'}" in r.stdout and "every requirement met" in r.stdout
    env["SPANUQ_REUSE_VENV"] = str(tmp_path / "no-venv")
    r = subprocess.run(["bash", "flows/worker_install.sh"], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "has no bin/python" in r.stderr
