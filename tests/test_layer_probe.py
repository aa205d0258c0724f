"""Layer probing: one oracle-span MLP per layer, scored on dev (paper Tab. A5)."""
import json

import numpy as np
import pytest
import torch

from spanuq.baselines.layer_probe import collect_layer_features, run_layer_probe
from spanuq.llm.loading import chat_prompt, load_backbone, response_token_ids
from spanuq.llm.states import extract_batch
from spanuq.pipeline.files import write_jsonl
from spanuq.pipeline.paths import StagePaths
from spanuq.pipeline.records import Generation, LabeledResponse, Sample, SpanTarget

ANSWERS = [
    "The capital of Australia is Canberra.", "Penicillin was discovered by Alexander Fleming in 1928.",
    "The Berlin Wall fell in 1989.", "Carmen was written by Georges Bizet.",
    "Titan is the largest moon of Saturn.", "Water boils at 100 degrees Celsius at sea level.",
    "Ada Lovelace wrote the first computer program.", "The Four Seasons was composed by Antonio Vivaldi.",
    "Mount Everest is 8,849 metres tall.", "The Mona Lisa was painted by Leonardo da Vinci.",
    "Ulaanbaatar is the capital of Mongolia.", "Neil Armstrong walked on the Moon in 1969.",
]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """generations.jsonl + labels.jsonl for 12 one-sentence answers: 8 train, 4 dev, 2 spans each."""
    from spanuq.config import load_config

    root = tmp_path_factory.mktemp("lp")
    cfg = load_config(None, [f"paths.data={root / 'data'}", f"paths.cache={root / 'cache'}"])
    _, tok = load_backbone(cfg)
    rng = np.random.default_rng(0)
    gens, labels = [], []
    for i, text in enumerate(ANSWERS):
        ids = response_token_ids(tok, text)
        spans = [SpanTarget(claim_id=f"a{i}:{k}", text="x", char_start=0, char_end=1, tok_start=b, tok_end=e,
                            u=float(rng.random())) for k, (b, e) in enumerate([(0, 1), (2, len(ids) - 1)])]
        gens.append(Generation(prompt_id=f"a{i}", backbone="smollm2-135m", prompt_text="Q?",
                               chat_prompt=chat_prompt(tok, "Tell me a fact."), greedy=Sample(text=text, token_ids=ids),
                               samples=[], decoding={}, seed=0))
        labels.append(LabeledResponse(prompt_id=f"a{i}", domain="custom", split="train" if i < 8 else "dev",
                                      response=text, n_tokens=len(ids), spans=spans,
                                      u_seq=float(np.mean([s.u for s in spans]))))
    paths = StagePaths.from_config(cfg)
    write_jsonl(paths.generations, gens)
    write_jsonl(paths.labels, labels)
    return cfg, gens, labels


def test_layer_features_are_span_means_of_that_layer(labelled):
    cfg, gens, labels = labelled
    model, tok = load_backbone(cfg)
    feats = collect_layer_features(cfg, labels[:3], {g.prompt_id: g for g in gens}, [4, 18], progress=False)
    assert feats[4].shape == (6, 576)
    (item,) = extract_batch(model, tok, [gens[1].chat_prompt], [gens[1].greedy.token_ids], [18], torch.float32)
    b, e = labels[1].spans[1].tok_start, labels[1].spans[1].tok_end
    np.testing.assert_allclose(feats[18][3], item.h[b: e + 1].mean(0).numpy(), atol=1e-4)


def test_probe_layers_writes_the_curve_scored_on_dev(labelled):
    cfg, _, _ = labelled
    res = run_layer_probe(cfg, layers=[2, 18], progress=False)
    assert [r["layer"] for r in res["rows"]] == [2, 18]
    assert all(r["n_test_spans"] == 8 and r["n_train_spans"] == 16 for r in res["rows"])
    out = StagePaths.from_config(cfg).root / "layer_probe"
    assert json.loads((out / "layer_auroc.json").read_text())["rows"][1]["layer"] == 18
    assert (out / "layer_auroc.csv").read_text().startswith("layer,auroc")
    assert (out / "layer_auroc.png").read_bytes()[:4] == b"\x89PNG"


def test_early_stopping_holds_out_whole_answers_not_random_spans():
    """Spans of one answer are correlated: the held-out part of train is a set of answers."""
    import numpy as np

    from spanuq.baselines.mlp_probe import train_span_mlp

    rng = np.random.default_rng(0)
    groups = [f"answer{i}" for i in range(20) for _ in range(3)]
    X, y = rng.normal(size=(60, 8)), rng.random(60)
    model = train_span_mlp(X, y, seed=0, groups=groups, max_epochs=3)
    held = model.info["held_out_groups"]
    assert held and model.info["n_dev"] == 3 * len(held)  # every span of a held-out answer, none of the others
    assert model.info["n_train"] + model.info["n_dev"] == 60
