"""The GPU path without a GPU: vLLM's contract through a stand-in `vllm` package (tests/fixtures/vllm_standin),
a tiny Qwen3 built offline (tests/qwen3_tiny.py), and the rule that makes them meet well: one GPU stage,
one process — vLLM refuses to start in a process that holds a backbone, and no path asks it to."""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import pytest

from qwen3_tiny import build_qwen3_tiny

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "fixtures" / "vllm_standin"
sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def own_process(monkeypatch):
    """The backbones a test here loads are the only ones its process holds, as in a GPU stage's own process:
    one another test module of this worker still holds (the session's `scorer`) is not on the stand-in's
    card, and vLLM's refusal beside a backbone is seen for the test's own."""
    import weakref

    from spanuq.llm import loading

    monkeypatch.setattr(loading, "_LIVE", weakref.WeakSet())


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    build_qwen3_tiny(root / "qwen3-8b")
    return root


@pytest.fixture
def qwen3(make_cfg, models):
    """``qwen3(*overrides)``: a config on the tiny Qwen3 (as backbone qwen3-8b, its layers 1 and 2)."""
    def make(*overrides: str):
        return make_cfg("backbone.name=qwen3-8b", f"paths.models={models}", "backbone.layers=[1,2]",
                        "backbone.system_prompt=null", "generate.stop=[]", *overrides)
    return make


@pytest.fixture
def standin(monkeypatch):
    """The stand-in `vllm` importable here and in child processes; a fresh copy for each test."""
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH")) if p))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    import vllm

    assert vllm.__file__.startswith(str(STANDIN))
    yield vllm
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


VLLM = ["generate.backend=vllm", "generate.n_samples=2", "generate.max_new_tokens=6",
        "generate.sample_max_new_tokens=6", "generate.vllm.gpu_memory_utilization=0.5"]


# ------------------------------------------------------------------ the Qwen3 chat template
def test_chat_prompts_switch_qwen3_thinking_off(qwen3):
    from spanuq.llm.loading import chat_prompt, load_tokenizer

    tok = load_tokenizer(qwen3())
    prompt = chat_prompt(tok, "Who wrote Hamlet?", "Answer briefly.")
    assert prompt.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWho wrote Hamlet?")
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # enable_thinking=False reached it
    thinking = tok.apply_chat_template([{"role": "user", "content": "Q"}], tokenize=False, add_generation_prompt=True)
    assert thinking.endswith("<|im_start|>assistant\n")


# ------------------------------------------------------------------ vLLM's contract and its release
def test_vllm_engine_gets_the_typed_settings_and_gives_its_memory_back(qwen3, standin):
    from spanuq.generate.vllm import VLLMGenerator, max_model_len

    cfg = qwen3(*VLLM, "generate.vllm.tensor_parallel_size=2", "generate.vllm.enforce_eager=true",
                "generate.vllm.prompt_tokens=200")
    assert max_model_len(cfg) == 256  # 200 + 6, rounded up to 256
    gen = VLLMGenerator(cfg)
    args = gen.llm.engine_args
    assert args["model"].endswith("qwen3-8b") and args["max_model_len"] == 256
    assert (args["tensor_parallel_size"], args["gpu_memory_utilization"], args["enforce_eager"]) == (2, 0.5, True)
    from spanuq.llm.loading import chat_prompt

    prompts = [chat_prompt(gen.llm.get_tokenizer(), q) for q in ("Capital of France?", "Who wrote Hamlet?")]
    greedy = gen.greedy(prompts)
    samples = gen.sample(prompts, 2, [11, 12])
    assert len(greedy) == 2 and [len(s) for s in samples] == [2, 2]
    assert samples == gen.sample(prompts, 2, [11, 12])  # seeded per prompt
    assert all(c.finish_reason in ("stop", "length") for c in greedy)
    (chat,) = gen.llm.chat([{"role": "user", "content": "Hi"}], standin.SamplingParams(max_tokens=3),
                           chat_template_kwargs={"enable_thinking": False})  # vLLM's chat entry, Qwen3's switch
    assert chat.prompt.endswith("</think>\n\n") and len(chat.outputs[0].token_ids) <= 3
    # a second engine while the first holds its share of the card: refused, as vLLM does
    with pytest.raises(ValueError, match="Free memory on device"):
        standin.LLM(**{**args, "gpu_memory_utilization": 0.6})
    gen.close()
    assert standin.CALLS[:2] == ["engine_core.shutdown", "cleanup_dist_env_and_memory"]
    assert standin.reserved_gib() == 0
    VLLMGenerator(cfg).close()  # the card is free again: the next engine (or model) starts


def test_close_ends_the_engine_core_while_the_engine_is_still_referenced(qwen3, standin):
    """A V1 engine's memory is its EngineCore process's.  ``close()`` shuts that process down through
    ``llm.llm_engine.engine_core``, not by dropping the engine and waiting for the garbage collector, which
    a reference held elsewhere (a traceback's frame, a caller that kept ``gen.llm``) puts off; then vLLM's
    teardown of this process, ``cleanup_dist_env_and_memory``."""
    from spanuq.generate.vllm import VLLMGenerator

    gen = VLLMGenerator(qwen3(*VLLM))
    engine = gen.llm  # still referenced after close()
    core = engine.llm_engine.engine_core.core
    assert core.running() and standin.reserved_gib() == 0.5 * standin.CARD_GIB
    gen.close()
    assert not core.running() and standin.reserved_gib() == 0
    assert standin.CALLS == ["engine_core.shutdown", "cleanup_dist_env_and_memory", "destroy_model_parallel",
                             "destroy_distributed_environment"]
    VLLMGenerator(qwen3(*VLLM)).close()  # the card is free: the next engine starts


def test_standin_vllm_refuses_a_process_that_holds_a_backbone(qwen3, standin):
    from spanuq.generate.vllm import VLLMGenerator
    from spanuq.llm.loading import live_backbones, load_backbone

    cfg = qwen3(*VLLM)
    model, _ = load_backbone(cfg)
    assert live_backbones() == [model]
    with pytest.raises(ValueError, match="Free memory on device .* is less than desired GPU memory utilization"):
        VLLMGenerator(cfg)
    del model, _
    gc.collect()
    VLLMGenerator(cfg).close()


# ------------------------------------------------------------------ no GPU stage of any path meets that refusal
def test_baselines_time_vllm_decoding_in_a_process_of_its_own(qwen3, standin):
    """The baselines stage times decoding in a child process, before it loads its backbone (on a GPU, the
    child's vLLM shares the card with this process)."""
    from spanuq.baselines.context import AnswerInfo
    from spanuq.baselines.cost import time_decoding
    from spanuq.llm.loading import chat_prompt, load_backbone, load_tokenizer

    cfg = qwen3(*VLLM)
    chat = chat_prompt(load_tokenizer(cfg), "Capital of France?")
    infos = [AnswerInfo("p1", "Capital of France?", chat, "Paris.", [], [])]
    out = time_decoding(cfg, infos)
    assert out["backend"] == "vllm" and out["n_answers"] == 1 and out["n_samples"] == 2
    assert out["greedy_seconds_per_answer"] > 0 and out["samples_seconds_per_answer"] > 0
    import vllm

    assert vllm.CORES == []  # the engine lived in the child only
    held = load_backbone(cfg)
    with pytest.raises(RuntimeError, match="before this process loads a backbone"):
        time_decoding(cfg, infos)
    assert held


def test_baselines_ask_the_backbone_they_hold_when_its_dtype_already_matches(qwen3):
    from spanuq.baselines.backbone import asker_config
    from spanuq.baselines.stage import Shared
    from spanuq.llm.loading import live_backbones

    cfg = qwen3("backbone.dtype=bfloat16", "baselines.backbone_dtype=bfloat16")
    assert asker_config(cfg) is cfg
    shared = Shared(cfg, context=None)
    model, _ = shared.backbone()
    assert shared.asker().model is model and len(live_backbones()) == 1  # no second copy
    other = asker_config(qwen3("backbone.dtype=float32", "baselines.backbone_dtype=bfloat16"))
    assert other.backbone.dtype == "bfloat16"


def test_pipeline_flow_runs_a_vllm_stage_in_its_own_process(qwen3, standin, tmp_path):
    """The Prefect pipeline flow's stage task, called where a backbone is held: the stage still starts vLLM."""
    from flows.pipeline import stage_task
    from spanuq.llm.loading import load_backbone
    from spanuq.stages import run_stage

    overrides = [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}", "backbone.name=qwen3-8b",
                 f"paths.models={Path(qwen3().paths.models)}", "backbone.layers=[1,2]", "backbone.system_prompt=null",
                 "generate.stop=[]", "prompts.n_prompts=3", "prompts.grounded=0", *VLLM]
    cfg = qwen3(*overrides)
    run_stage("prompts", cfg, progress=False)
    held, _ = load_backbone(cfg)
    out = stage_task.fn("generate", str(REPO / "params.yaml"), overrides, None)
    rows = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["samples"]) == 2 for r in rows)
    assert json.loads((tmp_path / "data" / "qwen3-8b" / "generate_report.json").read_text())["n"] == 3


def test_sweep_coordinator_extracts_features_in_a_child_process(qwen3, tmp_path, monkeypatch):
    """The coordinator's feature extraction loads no backbone in the coordinator (its trials use GPU 0)."""
    import spanuq.features.stage as extract_stage
    from spanuq.generate.stage import run_generate
    from spanuq.stages import run_stage
    from spanuq.sweep.trial import ensure_features, features_dir

    cfg = qwen3("prompts.n_prompts=2", "prompts.grounded=0", "generate.backend=hf", "generate.n_samples=1", "generate.max_new_tokens=5",
                "generate.sample_max_new_tokens=5", "backbone.layers=[1]")
    run_stage("prompts", cfg, progress=False)
    run_generate(cfg, progress=False)

    def refuse(*a, **k):
        raise AssertionError("the coordinator loaded a backbone")

    monkeypatch.setattr(extract_stage, "load_backbone", refuse)
    d = ensure_features(cfg)
    assert d == features_dir(cfg) and json.loads((d / "index.json").read_text())["meta"]["layers"] == [1]
    assert len(list((Path(cfg.paths.cache) / "qwen3-8b" / "extract").glob("*.safetensors"))) == 2  # both answers


# ------------------------------------------------------------------ the judge, checked before generation
def test_generate_fails_in_seconds_when_the_judge_does_not_answer(make_cfg):
    import socket

    from spanuq.generate.stage import run_generate
    from spanuq.llm.judge_endpoint import JudgeUnavailable, check_judge

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = make_cfg("label.method=judge", f"label.judge.base_url=http://127.0.0.1:{port}/v1")
    t0 = time.perf_counter()
    with pytest.raises(JudgeUnavailable, match=f"127.0.0.1:{port}.*label.method=offline"):
        run_generate(cfg, progress=False)
    assert time.perf_counter() - t0 < 15
    with pytest.raises(JudgeUnavailable, match="SPANUQ_NO_SUCH_KEY"):
        check_judge(make_cfg("label.method=judge", "label.judge.api_key_env=SPANUQ_NO_SUCH_KEY"))
    assert check_judge(make_cfg()) is None  # the offline teacher needs no judge


def test_the_judge_check_passes_a_judge_that_answers(make_cfg):
    from judge_server import ScriptedJudge
    from spanuq.llm.judge_endpoint import check_judge

    with ScriptedJudge() as judge:
        assert check_judge(make_cfg("label.method=judge", f"label.judge.base_url={judge.base_url}",
                                    "label.judge.model=scripted-judge")) == ["scripted-judge"]


def test_a_sweeps_upstream_caches_live_in_the_machines_checkout(make_cfg, monkeypatch, tmp_path):
    from spanuq.sweep.upstream import machine_cache

    cfg = make_cfg("paths.cache=.cache/spanuq")
    monkeypatch.setenv("SPANUQ_CHECKOUT", str(tmp_path / "checkout"))
    assert machine_cache(cfg) == [f"paths.cache={(tmp_path / 'checkout').resolve() / '.cache/spanuq'}"]
    monkeypatch.delenv("SPANUQ_CHECKOUT")
    assert machine_cache(cfg) == [f"paths.cache={Path.home() / '.cache' / 'spanuq' / 'items'}"]
    assert machine_cache(make_cfg(f"paths.cache={tmp_path / 'c'}")) == []  # already outside the clone
