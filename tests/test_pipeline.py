"""The DVC pipeline as a user drives it: `dvc repro` in a copy of this repo."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

BIN = Path(sys.executable).parent


def _copy_repo(src: Path, dst: Path, params: dict) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=src, check=True,
                           capture_output=True, text=True).stdout.split()
    for f in files:
        if (src / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / f, dst / f)
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


def _env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}


@pytest.mark.server
def test_killing_dvc_repro_during_generation_then_rerunning_resumes(repo_root, tmp_path):
    pytest.importorskip("llama_cpp")
    repo = _copy_repo(repo_root, tmp_path / "repo", {
        "prompts.n_prompts": 6, "generate.n_samples": 2, "generate.max_new_tokens": 16,
        "generate.batch_size": 1,
    })
    cache = repo / ".cache/spanuq/smollm2-135m/generate"
    proc = subprocess.Popen([str(BIN / "dvc"), "repro", "generate"], cwd=repo, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(cache.glob("*/*.json"))) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # like Ctrl-C twice, or an OOM kill
    proc.wait()
    done_before = len(list(cache.glob("*/*.json")))
    assert 2 <= done_before < 6

    out = subprocess.run([str(BIN / "dvc"), "repro", "generate"], cwd=repo, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads((repo / "data/smollm2-135m/generate_report.json").read_text())
    assert report["cached"] >= done_before and report["cached"] + report["generated"] == 6
    lines = (repo / "data/smollm2-135m/generations.jsonl").read_text().splitlines()
    assert len(lines) == 6
