"""The probe shipped in spanuq/probes/<backbone>/: it loads with no trained probe around and
names itself, its weights are the ones its card names, its card's test figures are what the
evaluate path gives on its stored test split, and it registers in MLflow as a scoring version."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from spanuq import SpanUQ
from spanuq.pipeline.files import sha256_file
from spanuq.score.shipped import PROBES, read_card, shipped_dir

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "smollm2-135m"
SHIPPED = shipped_dir(BACKBONE)
CARD = read_card(SHIPPED)
ANSWER = "Marie Curie was a Polish-French physicist who won the Nobel Prize in Physics in 1903 and Chemistry in 1911."


@pytest.fixture(scope="module")
def uq(tmp_path_factory):
    """`SpanUQ.load()` in a directory without data/ (a fresh install): the shipped probe."""
    here = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("no-data"))
    try:
        assert not Path("data").exists()
        with SpanUQ.load() as u:
            yield u
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def stored_test(uq):
    """The card's stored test answers, their states re-extracted with the backbone (read-only: once a module)."""
    from spanuq.score.shipped import test_examples

    return test_examples(SHIPPED, uq.model, uq.tok, uq.layers, CARD["extract"]["dtype"])


def test_without_a_trained_probe_load_takes_the_shipped_one_and_names_it(uq):
    assert uq.checkpoint.resolve() == SHIPPED.resolve()
    sha = CARD["weights"]["sha256"]
    assert uq.probe_source.startswith(f"shipped {BACKBONE} probe of {CARD['date'][:10]}, sha256 {sha[:12]}")
    assert uq.calibration.temperature == pytest.approx(CARD["calibration"]["temperature"])
    r = uq.score("Who was Marie Curie?", response=ANSWER)
    assert r.answer == ANSWER and 0.0 <= r.u_seq <= 1.0


def test_the_weights_are_the_ones_the_card_names():
    assert sha256_file(SHIPPED / "model.safetensors") == CARD["weights"]["sha256"]
    assert (SHIPPED / "model.safetensors").stat().st_size == CARD["weights"]["bytes"]
    assert f"sha256 `{CARD['weights']['sha256']}`" in (SHIPPED / "MODEL_CARD.md").read_text()




def test_the_card_matches_a_re_evaluation_on_its_stored_test_split(uq, stored_test):
    """Re-extract the stored test answers' states with the backbone, score them with the
    evaluate stage's code over every labelled span, and find the card's figures."""
    from spanuq.evaluate.stage import evaluate_probe
    from spanuq.features.dataset import answers

    test = stored_test
    assert len(test) == CARD["metrics"]["n_responses"]
    cfg = uq.cfg.model_copy(update={"evaluate": uq.cfg.evaluate.model_validate({**CARD["evaluate"], "bootstrap": 0})})
    metrics, _, _ = evaluate_probe(cfg, uq.probe, uq.fitted, test, "cpu", answers(uq.tok, test), window=uq.window)
    want, span = CARD["metrics"]["headline"], metrics["span"]
    assert int(sum(len(e.u) for e in test)) == CARD["metrics"]["n_spans"] == span["n"] == want["n_spans"]
    assert span["n"] - span["n_pos"] == want["negatives"]
    for key in ("auroc", "pair_accuracy", "ece", "mae"):
        got = span[key]["value"]
        assert (got is None) == (want[key] is None), key
        if got is not None:
            assert got == pytest.approx(want[key], abs=1e-3), key
    if want["detection_f1"] is not None:
        assert metrics["detection"]["f1"]["value"] == pytest.approx(want["detection_f1"], abs=1e-3)


def test_another_backbone_has_no_shipped_probe_and_says_so():
    with pytest.raises(FileNotFoundError, match="no shipped probe for backbone 'qwen3-14b'.*shipped: smollm2-135m"):
        shipped_dir("qwen3-14b")


def test_the_package_data_globs_take_the_shipped_files():
    from setuptools.config.pyprojecttoml import read_configuration

    globs = read_configuration(REPO / "pyproject.toml")["tool"]["setuptools"]["package-data"]["spanuq"]
    pkg = REPO / "spanuq"
    taken = {p for g in globs for p in pkg.glob(g) if p.is_file()}
    assert {p for p in SHIPPED.iterdir() if p.is_file()} <= taken
    assert {p.name for p in SHIPPED.iterdir()} >= {"model.safetensors", "config.json", "card.json", "MODEL_CARD.md",
                                                   "test_split.jsonl"}
    assert PROBES == pkg / "probes"


def test_spanuq_score_names_the_probe_it_scores_with(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "spanuq.cli", "score", "Who was Marie Curie?", "--response", ANSWER,
                          "--json", "-p", str(REPO / "params.yaml")], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert f"spanuq: probe: shipped {BACKBONE} probe of {CARD['date'][:10]}" in out.stderr
    assert json.loads(out.stdout)["answer"] == ANSWER


def test_the_registry_imports_the_shipped_probe_as_a_version_that_scores_like_it(make_cfg, uq, stored_test):
    """`spanuq registry import-shipped` on a local sqlite store: a tagged version of
    spanuq-<backbone> whose pyfunc gives the checkpoint's spans for the same states."""
    from spanuq.llm.states import FeatureItem
    from spanuq.model.postprocess import predict
    from spanuq.pipeline import tracking
    from spanuq.score.shipped import import_shipped

    cfg = make_cfg("mlflow.experiment=test-shipped")
    info = import_shipped(cfg)
    assert info["registered_model"] == f"spanuq-{BACKBONE}" and info["sha256"] == CARD["weights"]["sha256"]
    client = MlflowClient(tracking.tracking_uri(cfg))
    mv = client.get_model_version(info["registered_model"], str(info["model_version"]))
    assert mv.tags["source"] == "shipped" and mv.tags["sha256"] == CARD["weights"]["sha256"]

    ex = stored_test[0]
    pyfunc = mlflow.pyfunc.load_model(f"models:/{info['registered_model']}/{info['model_version']}")
    out = pyfunc.predict({"h": ex.h.numpy(), "entropy": ex.entropy.numpy()})[0]

    want = predict(uq.probe, [FeatureItem(ex.h, ex.entropy, torch.tensor(ex.token_ids, dtype=torch.int32))],
                   uq.fitted)[0]
    np.testing.assert_allclose(sorted(s["u"] for s in out["spans"]), sorted(want.u[want.keep]), rtol=1e-5)
    assert out["u_seq"] == pytest.approx(want.u_seq, rel=1e-5)
