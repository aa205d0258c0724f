"""The DVC pipeline as a user drives it: `dvc repro` in a copy of this repo."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from worktree import copy_worktree
from spanuq.llm.llamacpp import SERVER_MODULE

BIN = Path(sys.executable).parent


def _copy_repo(src: Path, dst: Path, params: dict) -> Path:
    copy_worktree(src, dst)
    tree = yaml.safe_load((dst / "params.yaml").read_text())
    for key, value in params.items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (dst / "params.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    return dst


def _llama_servers_in(repo: Path) -> list[int]:
    """Pids of llama.cpp servers running in `repo` (their working directory)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if SERVER_MODULE.encode() in (proc / "cmdline").read_bytes() and (proc / "cwd").resolve() == repo.resolve():
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


def _env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}


# the default in-process backend's run is `-m slow`: its resume is the item cache every backend shares
# (tests/test_generate.py::test_a_killed_run_resumes_and_empty_answers_are_recorded), and the
# server variant kills the same `dvc repro generate` the same way and also finds no server left
@pytest.mark.server
@pytest.mark.parametrize("backend", [pytest.param("llamacpp", marks=pytest.mark.slow), "server"])
def test_killing_dvc_repro_during_generation_then_rerunning_resumes(repo_root, tmp_path, backend):
    """Killed like an OOM kill half-way through generation (the default in-process llama.cpp, and
    the launched servers, which must not outlive the stage): the re-run generates only the rest."""
    pytest.importorskip("llama_cpp")
    repo = _copy_repo(repo_root, tmp_path / "repo", {
        "prompts.n_prompts": 6, "prompts.grounded": 0, "generate.n_samples": 2, "generate.max_new_tokens": 16,
        "generate.batch_size": 1, "generate.backend": backend,
    })
    cache = repo / ".cache/spanuq/smollm2-135m/generate"
    proc = subprocess.Popen([str(BIN / "dvc"), "repro", "generate"], cwd=repo, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(cache.glob("*/*.json"))) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        time.sleep(0.2)
    if backend == "server":
        assert _llama_servers_in(repo), "the generate stage should be running its llama.cpp server"
    os.killpg(proc.pid, signal.SIGKILL)  # like an OOM kill: no clean-up code runs
    proc.wait()
    deadline = time.monotonic() + 15
    while _llama_servers_in(repo) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _llama_servers_in(repo), "the llama.cpp server outlived the killed stage"
    done_before = len(list(cache.glob("*/*.json")))
    assert 2 <= done_before < 6

    out = subprocess.run([str(BIN / "dvc"), "repro", "generate"], cwd=repo, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads((repo / "data/smollm2-135m/runs/generate.json").read_text())
    assert run["cached"] >= done_before and run["cached"] + run["generated"] == 6
    assert run["backend"] == backend
    lines = (repo / "data/smollm2-135m/generations.jsonl").read_text().splitlines()
    assert len(lines) == 6


@pytest.mark.server
def test_dvc_repro_runs_the_six_stages_end_to_end_and_a_param_touches_only_the_stage_that_reads_it(
        repo_root, tmp_path, monkeypatch):
    """The whole spine on a tiny config: prompts → generate → label → extract → train → evaluate."""
    pytest.importorskip("llama_cpp")
    repo = _copy_repo(repo_root, tmp_path / "repo", {
        "prompts.n_prompts": 12, "prompts.grounded": 0, "generate.n_samples": 2, "generate.max_new_tokens": 24,
        "generate.sample_max_new_tokens": 24, "train.warmup_epochs": 2, "train.joint_epochs": 2,
        "train.members": 2,  # the default's ensemble, of two (trained side by side)
        "evaluate.bootstrap": 20, "baselines.cost_answers": 1,  # one answer's decoding timed, not three
        # the reader's stages on a few real items (tests/conftest.py TINY): they run, their numbers mean little
        "reader.sets": {"wice": {"train": 3, "dev": 2}, "swaps": {"train": 6, "dev": 4},
                        "summedits": {"train": 4, "dev": 3}},
        "reader.epochs": 5, "reader.members": 1, "reader.own_answers": {"dev": 3},
    })
    env = {**_env(), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    out = subprocess.run([str(BIN / "dvc"), "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "spanuq " in out.stdout and "token_entropy" in out.stdout  # the test-split table is printed
    root = repo / "data/smollm2-135m"
    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["n_responses"] >= 1 and "spanuq" in metrics  # the floors are the baselines stage's (below)
    assert (root / "probe/model.safetensors").exists() and (root / "plots/eval/examples.png").exists()
    assert len(metrics["spanuq"]["members_alone"]["span_auroc"]) == 2  # each member alone, beside the ensemble
    assert json.loads((root / "runs/train.json").read_text())["registered_model"] == "spanuq-smollm2-135m"
    base = json.loads((root / "baselines/metrics.json").read_text())
    assert set(base["methods"]) == {"surface_prior", "token_entropy", "mlp_probe", "verbalized", "p_true", "selfcheck_nli",
                                    "semantic_entropy", "eigenscore", "kle", "self_verify"}
    assert all("span" in r or "unavailable" in r for r in base["methods"].values())
    assert "seconds" not in json.dumps(base) and (root / "report/index.html").exists()  # seconds: the run log's
    assert json.loads((root / "runs/baselines.json").read_text())["cost"]["spanuq"]["seconds_per_answer"] > 0
    # the same inputs, the same outputs: generate, label and extract run again (from their item caches)
    # write the bytes dvc.lock holds, so the lock does not move and nothing after them looks changed;
    # how each run went is in runs/<stage>.json, which DVC does not track
    lock = (repo / "dvc.lock").read_text()
    out = subprocess.run([str(BIN / "dvc"), "repro", "--force", "--single-item", "generate", "label", "extract"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (repo / "dvc.lock").read_text() == lock
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    assert json.loads(status.stdout or "{}") == {}, status.stdout
    assert json.loads((root / "runs/extract.json").read_text())["extracted_now"] == 0
    # a training param touches the train stage alone: nothing upstream of it is out of date (what `dvc repro`
    # then reruns is train and what reads its probe, as the first run above did)
    tree = yaml.safe_load((repo / "params.yaml").read_text())
    tree["train"]["joint_epochs"] = 3
    (repo / "params.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    assert json.loads(status.stdout) == {"train": [{"changed deps": {"params.yaml": {"train": "modified"}}}]}, status.stdout

    # a user's own prompt file, never seen in training, scored by that probe (README "Unseen prompts"):
    # its answers are the test split; train/dev of the run above fit the methods of the baselines table
    user = tmp_path / "my_prompts.jsonl"
    user.write_text("".join(json.dumps({"text": t, "domain": "triviaqa", "references": r, "split": "test"}) + "\n" for t, r in [
        ("Which planet is known as the Red Planet?", ["Mars"]), ("Who painted the Mona Lisa?", ["Leonardo da Vinci"]),
        ("What is the capital of Australia?", ["Canberra"]), ("Which metal is liquid at room temperature?", ["mercury"])]))
    over = [f"paths.data={tmp_path / 'user'}", "prompts.source=file", f"prompts.file={user}", "prompts.n_prompts=null", "prompts.grounded=0",
            "prompts.split_by=prompts", f"evaluate.probe_from={repo / 'data'}",
            "baselines.methods=[surface_prior,token_entropy,mlp_probe]", "baselines.detectors=[]", "baselines.cost_answers=0"]
    from spanuq.cli import main  # each stage as `spanuq <stage>` runs it, in this process
    from spanuq.pipeline.kernels import AVX2_PINS

    monkeypatch.chdir(repo)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    for key, value in AVX2_PINS.items():  # this process's torch has chosen its kernels: leave later tests' env as it is
        monkeypatch.setenv(key, os.environ.get(key, value))
    for stage in ("prompts", "generate", "label", "extract", "evaluate", "baselines"):
        assert main([stage, "--no-progress", *(a for o in over for a in ("-o", o))]) in (0, None), stage
    mine = json.loads((tmp_path / "user/smollm2-135m/metrics.json").read_text())
    assert mine["probe"]["from"] == str(root / "probe") and 1 <= mine["n_responses"] <= 4
    base = json.loads((tmp_path / "user/smollm2-135m/baselines/metrics.json").read_text())
    assert base["n_responses"] == mine["n_responses"] and set(base["methods"]) == {"surface_prior", "token_entropy", "mlp_probe"}
