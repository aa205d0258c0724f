"""MLflow: runs, the model registry and the `champion` alias, on a real sqlite tracking store."""
import mlflow
import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from spanuq.config import ProbeConfig
from spanuq.model.calibration import Calibration
from spanuq.model.checkpoint import save_checkpoint
from spanuq.model.probe import SpanUQProbe
from spanuq.pipeline import tracking
from spanuq.score import registry

TINY = ProbeConfig(d_proj=32, n_queries=4, n_heads=2, d_ffn=64, dropout=0.0)
D = 16


@pytest.fixture
def cfg(make_cfg):
    return make_cfg("mlflow.experiment=test-registry")


def _probe_dir(tmp_path, seed: int):
    torch.manual_seed(seed)
    model = SpanUQProbe(TINY, D).eval()
    calibration = Calibration(temperature=2.0, validity_threshold=0.3)  # as fitted on dev by the train stage
    return save_checkpoint(model, TINY, D, tmp_path / f"probe-{seed}", calibration), model


def _register(cfg, tmp_path, seed: int, dev_auroc):
    probe_dir, model = _probe_dir(tmp_path, seed)
    with tracking.start_run(cfg, run_name=f"train-{seed}") as run:
        tracking.log_config(cfg)
        info = registry.log_probe(probe_dir, cfg, dev_auroc=dev_auroc)
    return info, run.info.run_id, model


def test_champion_alias_moves_only_when_dev_auroc_improves(cfg, tmp_path):
    name = registry.registered_name(cfg)
    assert name == "spanuq-smollm2-135m"
    steps = [(0, 0.70, True, 1), (1, 0.65, False, 1), (2, None, False, 1), (3, 0.70, False, 1), (4, 0.81, True, 5)]
    for seed, auroc, promoted, champion in steps:
        info, _, _ = _register(cfg, tmp_path, seed, auroc)
        assert info["model_version"] == seed + 1
        assert info["promoted"] is promoted, (seed, auroc)
        assert info["champion_version"] == champion
    client = MlflowClient(tracking.tracking_uri(cfg))
    assert int(client.get_model_version_by_alias(name, "champion").version) == 5
    assert registry.champion_auroc(client, name) == (5, 0.81)


def test_the_champion_loads_from_the_registry_and_scores_like_the_checkpoint(cfg, tmp_path):
    from spanuq.llm.states import FeatureItem
    from spanuq.model.checkpoint import load_checkpoint
    from spanuq.model.postprocess import predict

    _, run_id, _ = _register(cfg, tmp_path, 7, 0.9)
    run = MlflowClient(tracking.tracking_uri(cfg)).get_run(run_id)
    assert run.data.params["probe.d_proj"] == "128" and run.data.tags["backbone"] == "smollm2-135m"
    pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
    g = torch.Generator().manual_seed(0)
    h, ent = torch.randn(12, D, generator=g), torch.rand(12, generator=g)
    out = pyfunc.predict({"h": h.numpy(), "entropy": ent.numpy()})
    # the one post-processing step on the same checkpoint: its threshold, its temperature, duplicates removed
    ckpt = load_checkpoint(tmp_path / "probe-7")
    want = predict(ckpt.probe, [FeatureItem(h, ent, torch.arange(12, dtype=torch.int32))], ckpt.calibration)[0]
    assert len(out) == 1 and len(out[0]["spans"]) == len(want.keep) >= 1
    np.testing.assert_allclose(sorted(s["u"] for s in out[0]["spans"]), sorted(want.u[want.keep]), rtol=1e-5)
    assert out[0]["u_seq"] == pytest.approx(want.u_seq, rel=1e-5)
    # scores are calibrated by default (T = 2 pulls û towards 0.5); raw on request
    for s in out[0]["spans"]:
        assert abs(s["u"] - 0.5) <= abs(s["u_raw"] - 0.5) + 1e-9 and s["p"] >= 0.3
    raw = pyfunc.predict({"h": h.numpy(), "entropy": ent.numpy()}, params={"calibrated": False})
    assert [s["u"] for s in raw[0]["spans"]] == [s["u_raw"] for s in out[0]["spans"]]
    with pytest.raises(Exception, match="d_model"):
        pyfunc.predict({"h": np.zeros((5, D + 1), dtype=np.float32)})


def test_no_api_key_reaches_mlflow(cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("SPANUQ_TEST_KEY", "sk-very-secret-123")
    cfg = cfg.model_copy(update={"label": cfg.label.model_copy(update={
        "judge": cfg.label.judge.model_copy(update={"api_key_env": "SPANUQ_TEST_KEY"})})})
    with tracking.start_run(cfg, run_name="secret-check") as run:
        tracking.log_config(cfg)
    params = MlflowClient(tracking.tracking_uri(cfg)).get_run(run.info.run_id).data.params
    assert params["label.judge.api_key_env"] == "SPANUQ_TEST_KEY"
    assert not any("sk-very-secret" in v for v in params.values())
    assert not any("sk-very-secret" in p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file()
                   and p.suffix in (".json", ".yaml", ".txt", ""))


def test_logging_and_loading_the_model_warn_of_nothing(cfg, tmp_path):
    """The model is logged with its signature and an input example, and `predict` says what it takes:
    MLflow has nothing to warn about on every train."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _register(cfg, tmp_path, 3, 0.7)
        pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
        pyfunc.predict({"h": np.zeros((3, D), dtype=np.float32), "entropy": np.zeros(3, dtype=np.float32)})
    said = [str(w.message) for w in caught if "mlflow" in w.filename]
    assert not [m for m in said if "type hints" in m or "input example" in m or "input_example" in m], said
    # pandas' deprecation of comparing a DataFrame's columns with a range, which MLflow does on a DataFrame example
    assert not [w for w in caught if w.category.__name__ == "Pandas4Warning"], [str(w.message) for w in caught]
