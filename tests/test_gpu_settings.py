"""What a GPU user installs and configures: the `gpu` extra's bounds, the transformers keywords the code
passes, the `gpu-paper` preset against the paper, and docs/gpu.md's memory tables (computed from the
models' configs)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]

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


def test_gpu_paper_is_the_papers_generation_and_probe():
    from spanuq.config import load_config
    from spanuq.model.probe import SpanUQProbe

    cfg = load_config(REPO / "params.yaml", preset="gpu-paper")
    g = cfg.generate
    assert (g.n_samples, g.temperature, g.top_p) == (20, 1.0, 0.95)  # paper §4.1 / App. D.2
    assert g.max_new_tokens == g.sample_max_new_tokens == 512 and g.stop == []
    assert cfg.backbone.system_prompt is None and cfg.backbone.dtype == "bfloat16"
    p = cfg.probe
    assert (p.d_proj, p.n_queries, p.n_heads, p.d_ffn, p.enc_layers, p.dec_layers) == (512, 32, 8, 2048, 2, 3)
    assert (p.mob_components, p.ucir_alpha, p.enrichment, p.pooling) == (3, 0.7, "gate", "attention")
    assert (p.query_selection, p.refine, p.dn_groups, p.standardize, p.span_skip) == ("learned", False, 0, False, False)
    assert p.seq_weighting == "paper" and not p.use_surprisal
    assert (cfg.loss.rank, cfg.train.ema_decay, cfg.train.select, cfg.train.patience) == (0.5, None, "auroc", 5)
    assert (cfg.label.method, cfg.label.given_swaps, cfg.label.given_templates) == ("judge", False, 0)
    params = sum(t.numel() for t in SpanUQProbe(p, 5120).parameters()) / 1e6
    doc = (REPO / "docs" / "gpu.md").read_text()
    assert f"{params:.2f}M" in doc  # the documented count (the paper's 27.04M: docs/gpu.md says why not)


def test_docs_memory_tables_are_the_scripts_output():
    out = subprocess.run([sys.executable, "-m", "spanuq.llm.memory"], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    doc = (REPO / "docs" / "gpu.md").read_text()
    section = re.search(r"<!-- memory:start -->\n(.*)<!-- memory:end -->", doc, re.S).group(1)
    assert section == out, "docs/gpu.md is stale: paste `python -m spanuq.llm.memory` between the markers"


@pytest.mark.parametrize("name, billions", [("qwen3-4b", 4.0), ("qwen3-8b", 8.2), ("qwen3-14b", 14.8),
                                            ("qwen3-30b-a3b", 30.5), ("mistral-7b", 7.2)])
def test_architectures_give_the_published_parameter_counts(name, billions):
    from spanuq.llm.memory import n_params
    from spanuq.llm.presets import get_preset
    from spanuq.llm.shapes import architectures

    a = architectures()[name]
    assert round(n_params(a) / 1e9, 1) == billions
    assert (a.hidden_size, a.num_hidden_layers) == (get_preset(name).d_model, get_preset(name).n_layers)


def test_a_random_backbone_from_the_shapes_has_them():
    from spanuq.llm.memory import n_params
    from spanuq.llm.shapes import architectures, random_backbone

    model = random_backbone("smollm2-135m", "cpu", "float32")
    got = sum(t.numel() for n, t in model.named_parameters() if "norm" not in n)
    assert got == n_params(architectures()["smollm2-135m"])


def test_vllm_context_comes_from_the_prompt_and_answer_budgets(make_cfg):
    from spanuq.generate.vllm import max_model_len

    assert max_model_len(make_cfg("preset=gpu-paper")) == 1536  # 1024 + 512
    assert max_model_len(make_cfg("generate.max_new_tokens=100", "generate.sample_max_new_tokens=300")) == 1536
    assert max_model_len(make_cfg("generate.vllm.max_model_len=4096")) == 4096
    with pytest.raises(ValueError, match="max_model_len"):
        make_cfg("generate.vllm.max_model_len=8")
