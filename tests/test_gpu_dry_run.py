"""A dry run of the GPU path without a GPU (slow): ``gpu-paper`` through every stage — baselines included —
as the Prefect pipeline flow runs it, then a 2-trial sweep, on a tiny random-weight Qwen3 with a Qwen3-style
chat template (tests/qwen3_tiny.py), the transformers generator and a scripted judge, shrunk by overrides.

    python -m pytest -m slow tests/test_gpu_dry_run.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from judge_server import ScriptedJudge
from qwen3_tiny import build_qwen3_tiny

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

# gpu-paper, shrunk to minutes on a CPU: fewer and shorter answers, a small probe, few epochs
SHRINK = ["prompts.source=bundled", "prompts.n_prompts=16", "prompts.grounded=0", "prompts.split_sizes=null",
          "backbone.layers=[1,2]", "generate.backend=hf", "generate.n_samples=2", "generate.max_new_tokens=16",
          "generate.sample_max_new_tokens=16", "generate.batch_size=8", "label.alignment=embedding",
          "label.judge.model=scripted-judge", "label.judge.backoff_s=0.01", "label.judge.concurrency=8",
          "probe.d_proj=32", "probe.n_queries=8", "probe.n_heads=4", "probe.d_ffn=64", "train.warmup_epochs=1",
          "train.joint_epochs=2", "train.batch_size=8", "evaluate.bootstrap=20", "baselines.bootstrap=20",
          "baselines.cost_answers=1", "report.log_mlflow=false", "mlflow.register_model=false"]


PASSAGES = ["Paris is the capital and largest city of France.", "London is the capital of the United Kingdom.",
            "The Second World War ended in 1945."]


def _env(tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
           "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
           "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
           "SPANUQ_GPU_SLOTS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    return env


@pytest.mark.timeout(3600)
def test_gpu_paper_runs_every_stage_through_prefect_and_a_two_trial_sweep(tmp_path):
    build_qwen3_tiny(tmp_path / "models" / "qwen3-8b")
    corpus = tmp_path / "passages.jsonl"  # gpu-paper's judge verifies against passages, as the paper's
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(PASSAGES)))
    with ScriptedJudge(truths=("Paris", "London", "1945")) as judge:
        overrides = [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
                     f"paths.models={tmp_path / 'models'}", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                     f"label.judge.base_url={judge.base_url}", f"label.corpus={corpus}", *SHRINK]
        code = ("from flows.pipeline import pipeline; import json; "
                f"print(json.dumps(pipeline(backbone='qwen3-8b', params={str(REPO / 'params.yaml')!r}, "
                f"preset='gpu-paper', overrides={overrides!r})))")
        subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), cwd=REPO, check=True, timeout=3000)
        assert len(judge.requests) > 0  # the labels came from the judge

    root = tmp_path / "data" / "qwen3-8b"
    gens = [json.loads(line) for line in (root / "generations.jsonl").read_text().splitlines()]
    assert len(gens) == 16 and all(len(g["samples"]) == 2 for g in gens)
    assert "<think>" not in gens[0]["chat_prompt"].split("<|im_start|>assistant")[0]
    assert gens[0]["chat_prompt"].endswith("<think>\n\n</think>\n\n")  # Qwen3's template, thinking off
    metrics = json.loads((root / "baselines" / "metrics.json").read_text())
    assert metrics["backbone"] == "qwen3-8b" and metrics["n_samples"] == 2
    assert metrics["cost"]["decoding"]["backend"] == "hf"  # timed in its own process
    asked = [m for m in ("verbalized", "p_true", "self_verify") if "unavailable" not in metrics["methods"][m]]
    assert asked == ["verbalized", "p_true", "self_verify"], metrics["methods"]
    assert (root / "metrics.json").exists() and (root / "report").exists()

    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({
        "backbone": "qwen3-8b", "study": "dry-run", "sampler": "grid", "n_trials": 2, "seed": 0,
        "params": str(REPO / "params.yaml"), "preset": "gpu-paper", "overrides": ["backbone.name=qwen3-8b"],
        "space": {"backbone.layers": [[1, 2], [2]], "train.lr": [0.001]},
        "heartbeat_s": 30, "grace_s": 60, "max_retry": 0}))
    sweep_overrides = [o for o in overrides if not o.startswith("backbone.layers")]
    code = ("from flows.sweep import sweep; import json; "
            f"s = sweep(backbone='qwen3-8b', spec={str(spec)!r}, storage={'sqlite:///' + str(tmp_path / 'optuna.db')!r}, "
            f"overrides={sweep_overrides!r}, upstream=False); print(sorted(s))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), cwd=REPO, check=True, timeout=1800,
                         capture_output=True, text=True)
    import optuna

    trials = optuna.load_study(study_name="dry-run", storage=f"sqlite:///{tmp_path / 'optuna.db'}").get_trials()
    assert len(trials) == 2, out.stdout[-2000:]
    assert all(t.state.name in ("COMPLETE", "PRUNED") or "AUROC is undefined" in t.user_attrs.get("error", "")
               for t in trials), [t.user_attrs for t in trials]
    assert (root / "sweep-features").exists()  # the second layer set, extracted in its own process
