"""The pipeline flow: one implementation (`run_stage`), Prefect tasks cached on the stage's
inputs as dvc.yaml declares them, so a re-run skips what did not change."""
import json
import os
import subprocess
import sys

import pytest

from sweep_data import REPO, write_synthetic_run

sys.path.insert(0, str(REPO))
from flows.pipeline import stage_cache_key, stage_inputs, stage_outputs  # noqa: E402

TRAIN = ["probe.d_proj=32", "probe.n_queries=8", "probe.n_heads=4", "probe.d_ffn=64", "train.warmup_epochs=0",
         "train.joint_epochs=1", "train.num_threads=1", "mlflow.register_model=false"]


def _params(tmp_path, *extra):
    return {"name": "train", "params": str(REPO / "params.yaml"), "preset": None, "overrides": [
        f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
        f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *TRAIN, *extra]}


def test_stage_key_follows_dvc_yaml_params_and_deps(tmp_path, make_cfg):
    write_synthetic_run(tmp_path / "data")
    cfg = make_cfg(*TRAIN)
    inputs = stage_inputs("train", cfg)
    assert set(inputs["params"]) == {"preset", "backbone", "probe", "loss", "train", "evaluate",
                                     "generate.max_new_tokens",  # the windows of long answers
                                     "presets.cpu-full.generate", "presets.cpu-full.probe", "presets.cpu-full.train",
                                     "presets.gpu-paper.generate", "presets.gpu-paper.backbone",
                                     "presets.gpu-paper.probe", "presets.gpu-paper.loss", "presets.gpu-paper.train"}
    assert inputs["deps"]["data/${backbone.name}/labels.jsonl"] != "missing"
    assert {p.name for p in stage_outputs("train", cfg)} == {"probe", "train_report.json"}
    key = stage_cache_key(None, _params(tmp_path))
    assert key == stage_cache_key(None, _params(tmp_path))
    assert key != stage_cache_key(None, _params(tmp_path, "train.lr=0.01"))  # a param of the stage
    assert key == stage_cache_key(None, _params(tmp_path, "generate.temperature=0.3"))  # another stage's param
    labels = tmp_path / "data" / "smollm2-135m" / "labels.jsonl"
    labels.write_text(labels.read_text() + "\n")
    assert key != stage_cache_key(None, _params(tmp_path))  # a dependency's content


@pytest.mark.slow
def test_pipeline_flow_rerun_skips_finished_stages(tmp_path):
    """Prefect (ephemeral, PREFECT_HOME in tmp): train runs, is cached on re-run, runs again on a new lr."""
    write_synthetic_run(tmp_path / "data")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
           "PREFECT_LOGGING_LEVEL": "WARNING", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}
    env.pop("PREFECT_API_URL", None)
    report = tmp_path / "data" / "smollm2-135m" / "train_report.json"

    def run(*extra):
        p = _params(tmp_path, *extra)
        code = ("from flows.pipeline import pipeline; "
                f"pipeline(params={p['params']!r}, overrides={p['overrides']!r}, stages=['train'])")
        subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, check=True, timeout=600)
        return json.loads((report.parent / "runs" / "train.json").read_text())["mlflow_run_id"]

    first = run()
    assert run() == first  # cached: the stage did not run again
    report.unlink()
    assert run() != first  # an output was deleted: the stage runs whatever its key
    assert run("train.lr=0.001") != first
