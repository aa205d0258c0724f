"""What a GPU user configures: the `gpu-paper` preset against the paper, and docs/gpu.md's memory tables
(computed from the models' configs).  What a GPU user installs: tests/test_gpu_install.py."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

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


PAPER_PROBES = {"qwen3-14b": (32, 27.04), "qwen3-8b": (32, 26.51), "qwen3-4b": (32, 17.18),
                "qwen3-30b-a3b": (32, 25.46), "mistral-7b": (16, 26.50)}  # App. Tab. A7: n_q, probe parameters (M)


def test_docs_probe_sizes_are_the_gpu_paper_probe_counted_at_the_papers_settings():
    """docs/gpu.md's probe-size table: the gpu-paper probe built (the probe alone, no backbone) for each
    backbone's d_model with the paper's number of queries, against App. Tab. A7.  For Qwen3-14B
    (d = 5120) it is 23.14M against the paper's 27.04M."""
    from spanuq.config import load_config
    from spanuq.llm.presets import get_preset
    from spanuq.model.probe import SpanUQProbe

    probe = load_config(REPO / "params.yaml", preset="gpu-paper").probe
    doc = (REPO / "docs" / "gpu.md").read_text()
    table = re.search(r"<!-- probe-sizes:start -->\n(.*)<!-- probe-sizes:end -->", doc, re.S).group(1)
    rows = {cells[0]: cells[1:] for line in table.splitlines()[2:]
            if (cells := [c.strip() for c in line.strip().strip("|").split("|")])}
    assert set(rows) == set(PAPER_PROBES)
    for name, (n_queries, paper) in PAPER_PROBES.items():
        d = get_preset(name).d_model
        ours = sum(t.numel() for t in SpanUQProbe(probe.model_copy(update={"n_queries": n_queries}), d).parameters()) / 1e6
        assert rows[name] == [str(d), str(n_queries), f"{paper:.2f}M", f"{ours:.2f}M", f"{paper - ours:+.2f}M"], name
    assert rows["qwen3-14b"][3] == "23.14M"
