"""Two-phase training: warm-up then joint, early stopping on dev, seeded and deterministic on CPU."""
import math

import torch

import numpy as np
import pytest

from spanuq.evaluate.scoring import all_span_scores
from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
from spanuq.model.postprocess import predict
from spanuq.train.loop import dev_score, epoch_batches, evaluate_model, train_probe
from spanuq.train.stage import calibrate_on_dev
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
    # warm-up trains detection only: the uncertainty terms appear in the joint phase
    assert "train_loss_uq" not in info_a["history"][0] and "train_loss_rank" not in info_a["history"][1]
    assert all(math.isfinite(r["train_loss_uq"]) for r in info_a["history"][2:])
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


def test_model_selection_scores_every_labelled_dev_span(make_cfg):
    """Selection used matched pairs only, which rewards finding fewer, easier spans; the dev
    metric behind early stopping and the champion now covers every labelled dev span."""
    cfg = _cfg(make_cfg, warmup_epochs=1, joint_epochs=1, patience=10)
    dev = synthetic_examples(6, seed=1)
    model, info = train_probe(cfg, synthetic_examples(8), dev, progress=False)
    m = evaluate_model(model, dev, cfg, "cpu")
    assert m["span"]["n"] == sum(len(e.u) for e in dev)
    assert info["history"][-1]["dev_auroc"] == m["span"]["auroc"]["value"]
    assert m["span_matched"]["n"] <= m["span"]["n"]


def test_with_a_weight_average_the_averaged_probe_is_the_one_selected_and_returned(make_cfg):
    """train.ema_decay: θ̄ ← d·θ̄ + (1 − d)·θ after every step; dev sees θ̄ and θ̄ is kept."""
    train, dev = synthetic_examples(8), synthetic_examples(6, seed=1)
    raw, _ = train_probe(_cfg(make_cfg, warmup_epochs=1, joint_epochs=1, patience=10), train, dev, progress=False)
    cfg = _cfg(make_cfg, warmup_epochs=1, joint_epochs=1, patience=10, ema_decay=0.9)
    averaged, info = train_probe(cfg, train, dev, progress=False)
    assert info["best_epoch"] == 2
    assert not torch.equal(averaged.state_dict()["query_embed"], raw.state_dict()["query_embed"])
    m = evaluate_model(averaged, dev, cfg, "cpu")
    assert info["history"][-1]["dev_auroc"] == m["span"]["auroc"]["value"]


def test_threshold_and_temperature_are_fitted_on_dev_stored_and_applied_by_default(make_cfg, tmp_path):
    cfg = _cfg(make_cfg, warmup_epochs=2, joint_epochs=2, patience=10)
    dev = synthetic_examples(6, seed=1)
    model, _ = train_probe(cfg, synthetic_examples(8), dev, progress=False)
    calibration, calib = calibrate_on_dev(model, dev, cfg, "cpu")
    assert calib["validity_threshold"] in cfg.evaluate.threshold_grid and calib["temperature"] > 0
    assert (calibration.temperature, calibration.validity_threshold) == (calib["temperature"], calib["validity_threshold"])
    # the fitted temperature does not raise the soft-label NLL of every labelled dev span (it minimises it)
    preds = predict(model, dev, calibration)
    y = np.concatenate([e.u.numpy() for e in dev])
    nll = lambda s: -np.mean(y * np.log(np.clip(s, 1e-6, 1)) + (1 - y) * np.log(np.clip(1 - s, 1e-6, 1)))  # noqa: E731
    cal, _ = all_span_scores(preds, dev)
    raw, _ = all_span_scores(preds, dev, key="u_raw")
    assert nll(np.concatenate(cal)) <= nll(np.concatenate(raw)) + 1e-9
    save_checkpoint(model, TINY, 32, tmp_path / "probe", calibration)
    loaded = load_checkpoint(tmp_path / "probe")
    assert loaded.calibration == calibration  # stored with the checkpoint, applied by every consumer
    p = predict(loaded.probe, dev[:2], loaded.calibration)[0]
    t = calib["temperature"]
    expect = 1 / (1 + np.exp(-np.log(p.u_raw / (1 - p.u_raw)) / t))
    assert p.u == pytest.approx(expect, rel=1e-5) and p.threshold == calib["validity_threshold"]
    assert set(p.keep) <= set(np.flatnonzero(p.validity >= calib["validity_threshold"]))
    raw_p = predict(loaded.probe, dev[:2], loaded.calibration.raw())[0]
    assert np.array_equal(raw_p.u, p.u_raw)


def test_a_temperature_is_kept_only_when_it_helps_held_out_dev_answers():
    from scipy.special import expit, logit

    from spanuq.train.stage import cross_validated_temperature

    rng = np.random.default_rng(0)
    p = [rng.uniform(0.05, 0.95, 6) for _ in range(40)]  # 40 answers of 6 spans
    y = [(rng.random(6) < pi).astype(float) for pi in p]
    over = [expit(3.0 * logit(pi)) for pi in p]  # overconfident: T ≈ 3 repairs it
    t, cv = cross_validated_temperature(y, over)
    assert cv["used"] and 2.0 < t < 4.5 and cv["held_out_nll"] < cv["held_out_nll_t1"]
    t, cv = cross_validated_temperature(y, p)  # already calibrated: a fitted T only adds noise
    assert t == 1.0 and not cv["used"] and 0.7 < cv["fitted"] < 1.4


def test_given_answers_get_their_own_mapping_and_likely_wrong_threshold_fitted_on_dev(make_cfg, tmp_path):
    """Answers the backbone did not write are calibrated apart (`Calibration.for_source`): a bias b
    and temperature T of their own (Platt on the logit), and a "likely wrong" threshold per source
    chosen for precision on dev."""
    from spanuq.metrics.ece import soft_bce
    from spanuq.model.calibration import clipped_logit

    cfg = _cfg(make_cfg, warmup_epochs=2, joint_epochs=2, patience=10)
    dev, given = synthetic_examples(6, seed=1), synthetic_examples(12, seed=2)
    for e in given:  # a given answer's labels sit apart from the own answers': mostly right slots
        e.u = (e.u > 0.8).float()
    model, _ = train_probe(cfg, synthetic_examples(8), dev, progress=False)
    calibration, calib = calibrate_on_dev(model, dev, cfg, "cpu", given=given)
    g = calib["given"]
    assert g["used"] and g["spans"] == sum(len(e.u) for e in given)
    assert calibration.given == {"temperature": g["temperature"], "bias": g["bias"], "flag": g["flag"],
                                 "fact_spans": True}  # names, dates and numbers shown on their own
    assert 0.05 <= calibration.flag <= 0.95 and 0.05 <= g["flag"] <= 0.95
    # the given mapping fits the given answers' labels at least as well as the own answers' mapping does
    preds = predict(model, given, calibration.raw())
    raw = np.concatenate(all_span_scores(preds, given, key="u_raw")[0])
    y = np.concatenate([e.u.numpy() for e in given])
    for_given, for_own = calibration.for_source("given"), calibration.for_source("generated")
    assert for_own is calibration and for_given.flag == g["flag"] and for_given.given is None
    assert (soft_bce(y, clipped_logit(for_given.scores(raw)))
            <= soft_bce(y, clipped_logit(for_own.scores(raw))) + 1e-9)
    save_checkpoint(model, TINY, 32, tmp_path / "probe", calibration)
    assert load_checkpoint(tmp_path / "probe").calibration == calibration


def test_given_answers_mapping_reads_the_slots_surprisal_against_the_entropy_where_it_begins(make_cfg, tmp_path):
    """With enough swapped slots in the dev given answers, their mapping is fitted on the slots alone
    with each span's surprisal S and the entropy H₀ where it begins: here a slot is wrong when the
    backbone was surer (lower H₀) than the surprisal it met shows, which only w·S − v·H₀ tells (the
    probe never saw a slot, S alone mixes open places with wrong values); the mapping ranks by it."""
    from sklearn.metrics import roc_auc_score

    from spanuq.model.calibration import span_surprisal

    cfg = _cfg(make_cfg, warmup_epochs=2, joint_epochs=2, patience=10)
    dev, given = synthetic_examples(6, seed=1), synthetic_examples(40, seed=3)
    g = torch.Generator().manual_seed(4)
    for k, e in enumerate(given):
        T = int(e.h.shape[0])
        e.entropy = 0.5 + 4.0 * torch.rand(T, generator=g)  # open places and settled ones
        e.surprisal = e.entropy.clone()
        wrong = k % 2 == 0
        e.meta["slot"] = 0
        b, end = e.spans[0].tolist()
        e.surprisal[b: end + 1] = 0.0
        e.surprisal[b] = e.entropy[b] + (1.5 if wrong else 0.2)  # the backbone expected something else
        e.u = torch.zeros_like(e.u)
        e.u[0] = float(wrong)
    model, _ = train_probe(cfg, synthetic_examples(8), dev, progress=False)
    calibration, calib = calibrate_on_dev(model, dev, cfg, "cpu", given=given)
    info = calib["given"]
    assert info["fitted_on"] == "slots" and info["slots"] == 40 and info["surprisal"] > 0.3 and info["context"] > 0.3
    for_given = calibration.for_source("given")
    assert for_given.reads_surprisal and not calibration.reads_surprisal  # own answers do not read S
    preds = predict(model, given, for_given)  # every shown span reads its own S and H₀
    assert all(np.all((p.u >= 0) & (p.u <= 1)) for p in preds)
    sh = np.concatenate([span_surprisal(e.surprisal, e.entropy, e.spans[:1].numpy()) for e in given])
    labels = [float(e.u[0]) for e in given]
    slot_u = for_given.scores(np.full(len(given), 0.5), sh)
    assert roc_auc_score(labels, slot_u) == 1.0 and roc_auc_score(labels, sh[:, 0]) < 1.0
    with pytest.raises(ValueError, match="surprisal"):  # no surprisal stored: a clear error
        predict(model, synthetic_examples(2, seed=5), for_given)
    save_checkpoint(model, TINY, 32, tmp_path / "probe", calibration)
    assert load_checkpoint(tmp_path / "probe").calibration.for_source("given") == for_given


def test_a_new_calibration_is_saved_without_touching_the_weights_file(tmp_path):
    from dataclasses import replace

    from spanuq.model.calibration import Calibration
    from spanuq.model.checkpoint import save_calibration
    from spanuq.model.probe import SpanUQProbe
    from spanuq.pipeline.files import sha256_file

    calibration = Calibration(temperature=1.3)
    save_checkpoint(SpanUQProbe(TINY, 32), TINY, 32, tmp_path, calibration)
    before = sha256_file(tmp_path / "model.safetensors")
    refitted = replace(calibration, given={"temperature": 20.0, "bias": -1.0, "surprisal": 0.2, "context": 0.7})
    save_calibration(tmp_path, refitted)
    assert sha256_file(tmp_path / "model.safetensors") == before
    assert load_checkpoint(tmp_path).calibration == refitted


def test_a_given_mapping_of_the_earlier_form_is_left_out_with_a_warning():
    from spanuq.model.calibration import Calibration

    stored = {"temperature": 1.0, "excess": 0.0, "given": {"temperature": 20.0, "bias": -2.0, "excess": 0.27}}
    with pytest.warns(UserWarning, match="spanuq recalibrate"):
        c = Calibration.from_dict(stored)
    assert c.given is None and c.for_source("given") == c


def test_a_subject_the_backbone_does_not_know_is_told_by_flat_predictions_before_its_claims():
    from spanuq.model.unknown import fit_unknown_threshold, knowledge_entropy

    assert knowledge_entropy([0.5, 3.0, 1.0, 5.0], [(1, 2), (3, 3)]) == pytest.approx(4.0)  # first tokens 1 and 3
    assert knowledge_entropy([0.5], []) is None
    rng = np.random.default_rng(0)
    knew = rng.random(200) < 0.5
    stats = np.where(knew, rng.normal(1.0, 0.5, 200), rng.normal(3.0, 0.5, 200))
    tau, info = fit_unknown_threshold(stats, knew, precision=0.9)
    assert info["auroc"] > 0.95 and tau is not None and info["precision"] >= 0.9
    assert np.mean(~knew[stats >= tau]) >= 0.9 and info["recall"] > 0.8
    assert fit_unknown_threshold(stats, np.ones(200, bool))[0] is None  # it knew everything: no rule


def test_refine_margin_pairs_a_swap_with_the_own_answer_it_was_made_from():
    """Refine compares the backbone's own words with someone else's: the margin's pairs put each
    dev swap beside its own answer, the right one first (a swap to a wrong value: the own answer was right)."""
    from spanuq.train.given_calibration import swap_pairs

    own = synthetic_examples(2, seed=6)
    given = []
    for e, wrong in zip(own, (True, False)):
        g = synthetic_examples(1, seed=7)[0]
        g.prompt_id, g.spans, g.meta = f"{e.prompt_id}@given-swap", e.spans.clone(), {"slot": 1}
        g.u = torch.zeros(len(e.spans))
        g.u[1] = float(wrong)
        given.append(g)
    own_scores = [np.full(len(e.spans), 0.2), np.full(len(e.spans), 0.7)]
    given_scores = [np.full(len(g.spans), 0.9), np.full(len(g.spans), 0.4)]
    assert swap_pairs(given, given_scores, own, own_scores) == [(0.2, 0.9), (0.4, 0.7)]
    assert swap_pairs(given, given_scores, [], []) == []  # no own answer: no pair


def test_batches_of_alike_lengths_hold_every_answer_once_and_pad_less():
    """train.length_pool: pools of the epoch's random order sorted by length, cut into batches, the batches
    shuffled; 0 is the paper's batches of the random order."""
    lengths = [int(n) for n in torch.randint(5, 130, (597,), generator=torch.Generator().manual_seed(1))]
    plain = epoch_batches(lengths, 8, 0, torch.Generator().manual_seed(0))
    assert [i for b in plain for i in b] == torch.randperm(597, generator=torch.Generator().manual_seed(0)).tolist()
    pooled = epoch_batches(lengths, 8, 50, torch.Generator().manual_seed(0))
    assert sorted(i for b in pooled for i in b) == list(range(597)) and len(pooled) == 75  # 50 batches of 400 answers, 25 of 197
    padded = lambda batches: sum(max(lengths[i] for i in b) * len(b) for b in batches)  # noqa: E731
    assert padded(pooled) < 0.8 * padded(plain)
    assert pooled != epoch_batches(lengths, 8, 50, torch.Generator().manual_seed(1))  # each epoch meets others
    assert pooled == epoch_batches(lengths, 8, 50, torch.Generator().manual_seed(0))  # seeded
