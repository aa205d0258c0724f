"""Two-phase training: warm-up then joint, early stopping on dev, seeded and deterministic on CPU."""
import math

import torch

from spanuq.train import dev_score, train_probe
from test_probe import TINY, synthetic_examples


def _cfg(make_cfg, **train):
    cfg = make_cfg("train.batch_size=4", "evaluate.bootstrap=0", *(f"train.{k}={v}" for k, v in train.items()))
    return cfg.model_copy(update={"probe": TINY})


def test_training_is_seeded_and_deterministic_on_cpu(make_cfg):
    cfg = _cfg(make_cfg, warmup_epochs=2, joint_epochs=2, patience=10)
    train, dev = synthetic_examples(8, seed=0), synthetic_examples(4, seed=1)
    a, info_a = train_probe(cfg, train, dev, progress=False)
    b, info_b = train_probe(cfg, train, dev, progress=False)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert [r["phase"] for r in info_a["history"]] == ["warmup", "warmup", "joint", "joint"]
    assert [r["train_loss"] for r in info_a["history"]] == [r["train_loss"] for r in info_b["history"]]
    assert "train_loss_mob" not in info_a["history"][0] or info_a["history"][0]["train_loss_mob"] == 0
    c, _ = train_probe(_cfg(make_cfg, warmup_epochs=2, joint_epochs=2, patience=10, seed=1), train, dev, progress=False)
    assert not torch.equal(c.state_dict()["query_embed"], sa["query_embed"])


def test_early_stopping_counts_joint_epochs_without_dev_improvement(make_cfg):
    cfg = _cfg(make_cfg, warmup_epochs=1, joint_epochs=30, patience=2, lr=0.0)  # lr 0: dev never improves
    model, info = train_probe(cfg, synthetic_examples(8), synthetic_examples(4, seed=1), progress=False)
    assert info["epochs_run"] == 1 + 3 and info["best_epoch"] == 2


def test_model_selection_scores():
    m = {"span": {"auroc": {"value": 0.8}, "mae": {"value": 0.3}, "spearman": {"value": 0.5}}}
    assert dev_score(m) == 0.8 and math.isclose(dev_score(m, "auroc-mae"), 0.5)
    one_class = {"span": {"auroc": {"value": None, "undefined": "one class"}, "spearman": {"value": 0.4},
                          "mae": {"value": 0.1}}}
    assert dev_score(one_class) == 0.4
    assert dev_score({"span": {"auroc": {"value": None}, "spearman": {"value": None}}}) == -math.inf
