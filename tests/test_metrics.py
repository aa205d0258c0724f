"""Span / detection / sequence metrics, ECE and temperature scaling (spanuq.evaluate: metrics, detection, scoring, table)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from scipy.special import expit, logit
from scipy.stats import mannwhitneyu, pearsonr, rankdata, spearmanr
from sklearn.metrics import mean_absolute_error, roc_auc_score

from spanuq.config import EvaluateConfig
from spanuq.evaluate.detection import detection_metrics, match_spans
from spanuq.metrics.ece import expected_calibration_error, fit_temperature
from spanuq.metrics.uq import sequence_metrics, span_metrics
from spanuq.evaluate.scoring import evaluate_predictions, oracle_span_metrics
from spanuq.evaluate.table import format_table
from spanuq.features.dataset import ResponseExample
from spanuq.model.calibration import apply_temperature
from spanuq.model.postprocess import Prediction


def dumps(obj) -> str:
    return json.dumps(obj, allow_nan=False)  # raises on NaN / inf


def tied_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Soft labels on a 1/20 grid and scores on a 0.1 grid: many ties in both."""
    rng = np.random.default_rng(seed)
    y = rng.binomial(20, rng.random(n)) / 20
    s = np.round(np.clip(y + rng.normal(0, 0.25, n), 0, 1), 1)
    return y, s


def example(pid: str, spans, u, u_seq=None, T: int = 20) -> ResponseExample:
    spans = torch.tensor(spans, dtype=torch.long).reshape(-1, 2)
    return ResponseExample(prompt_id=pid, domain="custom", split="test", h=torch.zeros(T, 4),
                           entropy=torch.zeros(T), token_ids=list(range(T)), spans=spans,
                           u=torch.tensor(u, dtype=torch.float32).reshape(-1), u_seq=u_seq)


def pred(pid: str, spans, u, validity, u_seq) -> Prediction:
    """A prediction showing every span with validity >= 0.5."""
    validity = np.array(validity, dtype=np.float64)
    return Prediction(pid, np.array(spans, dtype=np.int64).reshape(-1, 2), np.array(u, dtype=np.float64), validity,
                      u_seq, keep=np.flatnonzero(validity >= 0.5), nu=np.ones(len(u)))


# ---------------------------------------------------------------- span metrics vs the libraries

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_span_metrics_equal_sklearn_and_scipy_with_ties(seed):
    y, s = tied_data(300, seed)
    m = span_metrics(y, s, positive_threshold=0.5)
    pos = y >= 0.5
    assert m["n"] == 300 and m["n_pos"] == pos.sum()
    assert m["auroc"]["value"] == pytest.approx(roc_auc_score(pos, s))
    assert m["mae"]["value"] == pytest.approx(mean_absolute_error(y, s))
    assert m["spearman"]["value"] == pytest.approx(spearmanr(y, s)[0])
    assert m["pearson"]["value"] == pytest.approx(pearsonr(y, s)[0])
    # independent routes: AUROC = Mann-Whitney U / (n1 n0) (ties count 1/2); ρ = Pearson of average ranks
    u_stat = mannwhitneyu(s[pos], s[~pos]).statistic
    assert m["auroc"]["value"] == pytest.approx(u_stat / (pos.sum() * (~pos).sum()))
    assert m["spearman"]["value"] == pytest.approx(np.corrcoef(rankdata(y), rankdata(s))[0, 1])
    assert m["mae"]["value"] == pytest.approx(np.abs(y - s).mean())
    assert m["auroc"]["ci"] is None


def test_positive_threshold_is_inclusive_and_configurable():
    y = np.array([0.1, 0.3, 0.5, 0.7])
    s = np.array([0.2, 0.6, 0.4, 0.9])
    assert span_metrics(y, s)["auroc"]["value"] == pytest.approx(roc_auc_score([0, 0, 1, 1], s))
    assert span_metrics(y, s, positive_threshold=0.3)["auroc"]["value"] == pytest.approx(
        roc_auc_score([0, 1, 1, 1], s))


def test_scores_outside_unit_interval_keep_ranks_but_not_mae_ece():
    y, s = tied_data(200, 3)
    ent = 5 * s - 1  # an entropy-like score: same ranking, outside [0, 1]
    m = span_metrics(y, ent, temperature=1.3)
    assert m["auroc"]["value"] == pytest.approx(span_metrics(y, s)["auroc"]["value"])
    assert m["spearman"]["value"] == pytest.approx(spearmanr(y, s)[0])
    for k in ("mae", "ece", "ece_cal"):
        assert m[k]["value"] is None and "outside [0, 1]" in m[k]["undefined"]
    dumps(m)


# ---------------------------------------------------------------- undefined cases

def test_one_class_gives_undefined_auroc_with_reason():
    y = np.full(12, 0.2)
    y[0] = 0.0
    m = span_metrics(y, np.linspace(0, 1, 12))
    assert m["auroc"] == {"value": None, "ci": None, "undefined": "one class only: all 12 spans have u* < 0.5"}
    assert m["spearman"]["value"] is not None
    m = span_metrics(np.ones(3), [0.1, 0.2, 0.3])
    assert m["auroc"]["undefined"] == "one class only: all 3 spans have u* >= 0.5"
    dumps(m)


def test_constant_predictions_and_too_few_items():
    m = span_metrics([0.1, 0.9, 0.4], [0.5, 0.5, 0.5])
    assert m["spearman"]["undefined"] == "constant predictions"
    assert m["pearson"]["undefined"] == "constant predictions"
    assert m["auroc"]["value"] == pytest.approx(0.5)  # defined: a constant score ranks nothing
    one = span_metrics([0.7], [0.6], bootstrap=50)
    assert one["spearman"]["undefined"] == "fewer than 2 items"
    assert one["auroc"]["value"] is None and one["mae"]["value"] == pytest.approx(0.1)
    empty = span_metrics([], [], temperature=1.0, bootstrap=20)
    assert all(empty[k]["value"] is None for k in ("auroc", "mae", "spearman", "pearson", "ece", "ece_cal"))
    assert empty["n"] == 0
    text = dumps([m, one, empty])
    assert "NaN" not in text and "Infinity" not in text


def test_invalid_inputs_raise():
    with pytest.raises(ValueError):
        span_metrics([0.1, 0.2], [0.1])
    with pytest.raises(ValueError):
        span_metrics([0.1, np.nan], [0.1, 0.2])
    with pytest.raises(ValueError):
        span_metrics([0.1, 1.5], [0.1, 0.2])


# ---------------------------------------------------------------- ECE and temperature

def test_ece_zero_when_perfectly_calibrated():
    rng = np.random.default_rng(0)
    p = rng.random(50_000)
    assert expected_calibration_error(p, p, 10) == pytest.approx(0.0, abs=1e-12)
    # u* = empirical error rate over S = 20 samples with true rate û: calibrated up to sampling noise
    y = rng.binomial(20, p) / 20
    assert expected_calibration_error(y, p, 10) < 0.005
    assert expected_calibration_error(y, np.clip(p + 0.1, 0, 1), 10) > 0.07


def test_ece_hand_computed_two_bins():
    u_pred = np.array([0.1, 0.2, 0.7, 0.9])
    u_true = np.array([0.0, 0.5, 1.0, 1.0])
    # bin [0, .5): mean û .15, mean u* .25 → .1 · 2/4; bin [.5, 1]: .8 vs 1 → .2 · 2/4
    assert expected_calibration_error(u_true, u_pred, 2) == pytest.approx(0.15)
    assert span_metrics(u_true, u_pred, ece_bins=2)["ece"]["value"] == pytest.approx(0.15)
    # û = 1 falls into the last bin
    assert expected_calibration_error([1.0, 0.0], [1.0, 0.0], 2) == pytest.approx(0.0)


@pytest.mark.parametrize("t0", [0.5, 2.0])
def test_fit_temperature_recovers_known_t(t0):
    rng = np.random.default_rng(1)
    p = rng.uniform(0.02, 0.98, 20_000)
    y = rng.binomial(20, expit(logit(p) / t0)) / 20
    t = fit_temperature(y, p)
    assert t == pytest.approx(t0, rel=0.05)
    m = span_metrics(y, p, temperature=t)
    assert m["temperature"] == pytest.approx(t)
    assert m["ece_cal"]["value"] < 0.01 < m["ece"]["value"]
    np.testing.assert_allclose(apply_temperature(p, 1.0), p, atol=1e-9)


def test_fit_temperature_is_about_one_when_calibrated():
    rng = np.random.default_rng(2)
    p = rng.random(20_000)
    assert fit_temperature(rng.binomial(20, p) / 20, p) == pytest.approx(1.0, abs=0.05)


# ---------------------------------------------------------------- span matching and detection

def brute_force_best(pred, gt, thr) -> float:
    """Max Σ IoU over one-to-one matchings using only pairs with IoU ≥ thr (by enumeration)."""
    def iou(a, b):
        inter = max(0, min(a[1], b[1]) + 1 - max(a[0], b[0]))
        return inter / ((a[1] - a[0] + 1) + (b[1] - b[0] + 1) - inter)
    n = max(len(pred), len(gt))
    best = 0.0
    for perm in itertools.permutations(range(n)):
        tot = 0.0
        for p, g in enumerate(perm):
            if p < len(pred) and g < len(gt):
                v = iou(pred[p], gt[g])
                tot += v if v >= thr and v > 0 else 0.0
        best = max(best, tot)
    return best


def random_spans(rng, k, T=12) -> np.ndarray:
    b = rng.integers(0, T, k)
    return np.stack([b, np.minimum(b + rng.integers(0, 4, k), T - 1)], 1) if k else np.zeros((0, 2), int)


@pytest.mark.parametrize("seed", range(25))
def test_match_spans_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    pred, gt = random_spans(rng, rng.integers(0, 5)), random_spans(rng, rng.integers(0, 5))
    thr = [0.0, 0.3, 0.5][seed % 3]
    pairs = match_spans(pred, gt, thr)
    assert sum(i for *_, i in pairs) == pytest.approx(brute_force_best(pred.tolist(), gt.tolist(), thr))
    assert len({p for p, _, _ in pairs}) == len(pairs) == len({g for _, g, _ in pairs})  # one-to-one
    assert all(i >= thr and i > 0 for *_, i in pairs)


def test_match_spans_known_case_and_threshold():
    gt = np.array([[0, 3], [10, 11]])
    pred = np.array([[10, 11], [0, 1], [20, 22]])
    # [0,4) vs [0,2) → IoU 2/4; [10,12) exact → 1; [20,23) overlaps nothing
    assert match_spans(pred, gt, 0.3) == [(1, 0, 0.5), (0, 1, 1.0)]
    assert match_spans(pred, gt, 0.6) == [(0, 1, 1.0)]
    assert match_spans(np.zeros((0, 2)), gt, 0.3) == []
    assert match_spans(torch.tensor(pred), torch.tensor(gt), 0.3) == [(1, 0, 0.5), (0, 1, 1.0)]


def test_sub_threshold_pairs_do_not_steal_a_match():
    pred, gt = np.array([[3, 7], [6, 9]]), np.array([[9, 12], [6, 7]])
    # IoU [[0, .4], [1/7, .5]]: the unrestricted optimum (.4 + 1/7) keeps nothing at 0.5;
    # restricting the assignment to pairs ≥ 0.5 keeps (1, 1)
    assert match_spans(pred, gt, 0.5) == [(1, 1, 0.5)]


def test_detection_metrics_hand_made():
    preds = [np.array([[0, 3], [5, 9], [20, 21]]), np.array([[2, 4]]), np.zeros((0, 2))]
    gts = [np.array([[0, 3], [6, 9]]), np.zeros((0, 2)), np.array([[1, 2]])]
    # response 1: [0,3] exact, [5,9] vs [6,9] IoU 4/5, [20,21] FP; response 2: 1 FP; response 3: 1 FN
    d = detection_metrics(preds, gts, iou_threshold=0.3)
    assert (d["n_pred"], d["n_gt"], d["n_matched"]) == (4, 3, 2)
    assert d["precision"]["value"] == pytest.approx(2 / 4)
    assert d["recall"]["value"] == pytest.approx(2 / 3)
    assert d["f1"]["value"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert d["mean_iou"]["value"] == pytest.approx(0.9)
    assert detection_metrics(preds, gts, iou_threshold=0.9)["n_matched"] == 1
    none = detection_metrics([np.zeros((0, 2))], [np.array([[0, 1]])])
    assert none["precision"]["undefined"] == "no predicted spans" and none["f1"]["value"] is None
    assert none["recall"]["value"] == 0.0
    dumps([d, none])


# ---------------------------------------------------------------- bootstrap

def test_bootstrap_ci_brackets_shrinks_and_is_deterministic():
    rng = np.random.default_rng(5)
    def data(n_resp):
        g = np.repeat(np.arange(n_resp), 4)
        y = rng.binomial(20, rng.random(len(g))) / 20
        return y, np.clip(y + rng.normal(0, 0.3, len(g)), 0, 1), g
    small, large = data(50), data(1000)
    a = span_metrics(*small[:2], bootstrap=300, groups=small[2], seed=3)
    b = span_metrics(*large[:2], bootstrap=300, groups=large[2], seed=3)
    for k in ("auroc", "mae", "spearman", "pearson", "ece"):
        lo, hi = a[k]["ci"]
        assert lo <= a[k]["value"] <= hi and a[k]["n_boot"] == 300
        assert b[k]["ci"][1] - b[k]["ci"][0] < (hi - lo) / 2
    assert a == span_metrics(*small[:2], bootstrap=300, groups=small[2], seed=3)
    assert a["auroc"]["ci"] != span_metrics(*small[:2], bootstrap=300, groups=small[2], seed=4)["auroc"]["ci"]
    assert a["bootstrap"]["unit"] == "response" and a["n_groups"] == 50
    dumps([a, b])


def test_cluster_bootstrap_resamples_responses():
    rng = np.random.default_rng(6)
    y_r = rng.binomial(20, rng.random(40)) / 20
    s_r = np.clip(y_r + rng.normal(0, 0.3, 40), 0, 1)
    y, s, g = np.repeat(y_r, 25), np.repeat(s_r, 25), np.repeat(np.arange(40), 25)  # 25 identical spans each
    clustered = span_metrics(y, s, bootstrap=300, groups=g)["mae"]["ci"]
    naive = span_metrics(y, s, bootstrap=300)["mae"]["ci"]
    assert clustered[1] - clustered[0] > 3 * (naive[1] - naive[0])


def test_bootstrap_skips_undefined_resamples_and_counts_them():
    y = np.zeros(100)
    y[:10] = 1.0  # only response 0 has positives
    s = np.linspace(0, 1, 100)
    m = span_metrics(y, s, bootstrap=200, groups=np.arange(100) // 10, seed=0)
    assert 0 < m["auroc"]["n_boot"] < 200  # resamples without response 0 have one class
    assert m["mae"]["n_boot"] == 200


# ---------------------------------------------------------------- sequence level

def test_sequence_metrics():
    y, s = tied_data(120, 7)
    m = sequence_metrics(y, s, positive_threshold=0.3, bootstrap=100)
    assert m["auroc@0.3"]["value"] == pytest.approx(roc_auc_score(y >= 0.3, s))
    assert m["spearman"]["value"] == pytest.approx(spearmanr(y, s)[0])
    assert m["pearson"]["value"] == pytest.approx(pearsonr(y, s)[0])
    assert m["mae"]["value"] == pytest.approx(mean_absolute_error(y, s))
    assert m["n"] == 120 and m["bootstrap"]["unit"] == "sequence"
    lo, hi = m["spearman"]["ci"]
    assert lo <= m["spearman"]["value"] <= hi
    assert sequence_metrics([0.5], [0.1])["spearman"]["undefined"] == "fewer than 2 items"


# ---------------------------------------------------------------- end to end on probe predictions

def three_responses():
    cfg = EvaluateConfig()
    examples = [
        example("a", [[0, 2], [5, 7]], [0.9, 0.1], u_seq=0.5),
        example("b", [], []),  # no ground truth: its predictions are false positives
        example("c", [[0, 4]], [0.6]),  # u_seq falls back to mean(u) = 0.6
    ]
    preds = [
        pred("a", [[0, 2], [5, 6], [10, 12]], [0.8, 0.3, 0.5], [0.9, 0.8, 0.2], 0.55),
        pred("b", [[1, 3]], [0.6], [0.7], 0.4),
        pred("c", [[0, 4], [8, 9]], [0.7, 0.2], [0.1, 0.3], 0.2),  # nothing kept
    ]
    return cfg, examples, preds


def test_evaluate_predictions_scores_every_labelled_span():
    cfg, examples, preds = three_responses()
    r = evaluate_predictions(preds, examples, cfg)
    span, det, seq = r["span"], r["detection"], r["sequence"]
    # every labelled span: a[0,2] ← kept [0,2] (û .8), a[5,7] ← kept [5,6] (û .3),
    # c[0,4] ← nothing kept in c, so c's û_seq (.2); b has no labelled span
    y, s = np.array([0.9, 0.1, 0.6]), np.array([0.8, 0.3, 0.2])
    assert (span["n"], span["n_pos"], span["n_groups"]) == (3, 2, 2)
    assert span["auroc"]["value"] == pytest.approx(roc_auc_score(y >= 0.5, s))
    assert span["mae"]["value"] == pytest.approx(mean_absolute_error(y, s))
    assert r["span_sources"] == {"detected": 2, "sequence": 1}
    # within-answer pairs with |Δu*| >= 0.3: only a's (.9 vs .1), ordered right by (.8 vs .3)
    assert span["n_pairs"] == 1 and span["pair_accuracy"]["value"] == 1.0
    # the matched-only figures are a secondary section: a[0,2]↔[0,2] (IoU 1), a[5,6]↔[5,7] (IoU 2/3)
    matched = r["span_matched"]
    assert (matched["n"], matched["n_pos"]) == (2, 1) and matched["mae"]["value"] == pytest.approx(0.15)
    assert (det["n_pred"], det["n_gt"], det["n_matched"]) == (3, 3, 2)
    assert det["precision"]["value"] == pytest.approx(2 / 3)
    assert det["recall"]["value"] == pytest.approx(2 / 3)
    assert det["f1"]["value"] == pytest.approx(2 / 3)
    assert det["mean_iou"]["value"] == pytest.approx((1 + 2 / 3) / 2)
    assert r["coverage"]["value"] == pytest.approx(2 / 3)
    # sequence: a (0.5 vs 0.55) and c (0.6 vs 0.2); b has no u*_seq
    assert seq["n"] == 2 and seq["mae"]["value"] == pytest.approx((0.05 + 0.4) / 2)
    assert seq["spearman"]["value"] == pytest.approx(-1.0)
    assert seq["auroc@0.3"]["undefined"] == "one class only: all 2 sequences have u* >= 0.3"
    dumps(r)
    r_boot = evaluate_predictions(preds, examples, cfg, bootstrap=50, temperature=0.8)
    assert r_boot["span"]["temperature"] == 0.8 and r_boot["span"]["ece_cal"]["value"] is not None
    # resamples drawing only b (no GT) or only c (nothing predicted) leave F1 undefined and are skipped
    assert 40 < r_boot["detection"]["f1"]["n_boot"] < 50
    dumps(r_boot)


def test_a_method_cannot_look_better_by_finding_fewer_spans():
    """Old rule (matched pairs only): finding just the easy span scored AUROC 1; now every labelled
    span counts, the missed ones at the answer's û_seq, and the probe and an oracle-span baseline
    are scored on the same span set."""
    cfg = EvaluateConfig(bootstrap=0)
    examples = [example(f"r{i}", [[0, 1], [4, 5], [8, 9]], [0.9, 0.1, 0.8], u_seq=0.6) for i in range(4)]
    # the probe finds only the first (easy) span of each answer, û_seq 0.3 everywhere
    only_easy = [pred(e.prompt_id, [[0, 1]], [0.95], [0.9], 0.3) for e in examples]
    r = evaluate_predictions(only_easy, examples, cfg)
    assert r["span_matched"]["n"] == 4
    assert r["span"]["n"] == 12 and r["span_sources"] == {"detected": 4, "sequence": 8}
    assert r["span"]["auroc"]["value"] == pytest.approx(roc_auc_score([1, 0, 1] * 4, [0.95, 0.3, 0.3] * 4))
    baseline = oracle_span_metrics([np.array([0.5, 0.5, 0.5])] * 4, examples, cfg)
    assert baseline["span"]["n"] == r["span"]["n"] and baseline["span"]["n_groups"] == r["span"]["n_groups"]


def test_an_unmatched_span_takes_the_best_overlapping_prediction_else_the_sequence_score():
    from spanuq.evaluate.scoring import all_span_scores

    ex = [example("a", [[0, 9], [12, 13], [16, 17]], [0.9, 0.2, 0.4])]
    # kept: [0,1] (IoU 0.2 with [0,9]), [2,9] (IoU 0.8) — the better overlap wins; [12,13] exact; nothing on [16,17]
    p = [pred("a", [[0, 1], [2, 9], [12, 13], [18, 19]], [0.1, 0.7, 0.3, 0.9], [0.9, 0.6, 0.8, 0.2], 0.45)]
    scores, sources = all_span_scores(p, ex, validity_threshold=0.5)
    assert scores[0].tolist() == pytest.approx([0.7, 0.3, 0.45])
    assert sources == {"detected": 2, "sequence": 1}


def test_pair_accuracy_counts_within_answer_pairs_and_halves_ties():
    y = np.array([0.9, 0.1, 0.5, 0.8, 0.0])
    s = np.array([0.7, 0.2, 0.2, 0.4, 0.4])
    g = ["a", "a", "a", "b", "b"]
    m = span_metrics(y, s, groups=g)
    # a: (.9,.1) right, (.9,.5) right, (.1,.5) tie → 0.5; b: (.8,.0) tie → 0.5; pairs across answers never count
    assert m["n_pairs"] == 4 and m["pair_accuracy"]["value"] == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    # a sequence score broadcast to every span of an answer cannot tell its spans apart
    assert span_metrics(y, np.array([0.3, 0.3, 0.3, 0.9, 0.9]), groups=g)["pair_accuracy"]["value"] == 0.5
    assert span_metrics(y, s, groups=g, pair_gap=0.95)["pair_accuracy"]["undefined"].startswith("no within-answer")
    boot = span_metrics(y, s, groups=g, bootstrap=30)
    assert boot["pair_accuracy"]["ci"] is not None
    assert "pair_accuracy" not in span_metrics(y, s)


def test_calibrated_predictions_report_the_raw_ece_beside():
    cfg = EvaluateConfig(bootstrap=0)
    ex = [example("a", [[0, 1], [4, 5]], [0.9, 0.1])]
    p = pred("a", [[0, 1], [4, 5]], [0.8, 0.2], [0.9, 0.9], 0.5)
    p.u_raw, p.u_seq_raw = np.array([0.99, 0.01]), 0.5
    r = evaluate_predictions([p], ex, cfg)
    assert r["span"]["ece"]["value"] == pytest.approx(0.1)
    assert r["span"]["ece_raw"]["value"] == pytest.approx(0.09)


def test_evaluate_predictions_degenerate_inputs():
    cfg, examples, preds = three_responses()
    for p in preds:
        p.validity, p.keep = np.zeros_like(p.validity), np.zeros(0, dtype=np.int64)
    r = evaluate_predictions(preds, examples, cfg, bootstrap=20)  # no kept predictions at all
    # every labelled span still counts, at its answer's û_seq (a: .55 for u* .9 and .1, c: .2 for .6)
    assert r["span"]["n"] == 3 and r["span_sources"] == {"sequence": 3}
    assert r["span"]["pair_accuracy"]["value"] == 0.5
    assert r["span_matched"]["n"] == 0 and r["span_matched"]["auroc"]["value"] is None
    assert r["detection"]["precision"]["undefined"] == "no predicted spans"
    assert r["coverage"]["value"] == 0.0
    dumps(r)
    single = evaluate_predictions([pred("a", [[0, 2]], [0.4], [0.9], 0.3)],
                                  [example("a", [[0, 2]], [0.2])], cfg, bootstrap=20)
    assert single["detection"]["f1"]["value"] == 1.0 and single["span"]["mae"]["value"] == pytest.approx(0.2)
    assert single["sequence"]["n"] == 1
    dumps(single)
    empty = evaluate_predictions([pred("b", [], [], [], 0.1)], [example("b", [], [])], cfg)
    assert empty["coverage"]["undefined"] == "no ground-truth spans"
    dumps(empty)
    with pytest.raises(ValueError):
        evaluate_predictions(preds[:2], examples, cfg)
    with pytest.raises(ValueError):
        evaluate_predictions(preds[::-1], examples, cfg)


def test_oracle_span_metrics():
    cfg, examples, _ = three_responses()
    scores = [np.array([0.7, 0.2]), np.zeros(0), np.array([0.4])]
    r = oracle_span_metrics(scores, examples, cfg)
    y, s = np.array([0.9, 0.1, 0.6]), np.array([0.7, 0.2, 0.4])
    assert r["span"]["n"] == 3 and r["span"]["n_groups"] == 2
    assert r["span"]["mae"]["value"] == pytest.approx(mean_absolute_error(y, s))
    assert r["span"]["auroc"]["value"] == pytest.approx(roc_auc_score(y >= 0.5, s))
    # sequence: a (0.5 vs mean 0.45), c (0.6 vs 0.4); b skipped (no spans)
    assert r["sequence"]["n"] == 2 and r["sequence"]["mae"]["value"] == pytest.approx(0.125)
    with pytest.raises(ValueError):
        oracle_span_metrics([np.zeros(1), np.zeros(0), np.zeros(1)], examples, cfg)
    dumps(r)


# ---------------------------------------------------------------- table

def test_format_table():
    rows = {
        "SpanUQ": {"span": {"n": 79, "n_pos": 69, "auroc": {"value": 0.8123, "ci": [0.7712, 0.8456]},
                            "mae": {"value": 0.1, "ci": None}, "ece": {"value": None, "ci": None, "undefined": "x"},
                            "pair_accuracy": {"value": 0.75, "ci": None}},
                   "span_matched": {"auroc": {"value": 0.95, "ci": None}},
                   "coverage": {"value": 0.5, "ci": None},
                   "detection": {"f1": {"value": 0.5, "ci": None}},
                   "sequence": {"spearman": {"value": 0.7, "ci": None}, "auroc@0.3": {"value": 0.9, "ci": None}}},
        "Token entropy": {"span": {"auroc": {"value": 0.6, "ci": None}}, "sequence": {}},
    }
    text = format_table(rows)
    lines = text.splitlines()
    assert len(lines) == 4  # no interval wider than ±0.1: no warning line
    for col in ("AUROC", "neg", "pair acc", "MAE", "ρ_s", "ECE", "F1", "coverage", "AUROC matched", "seq ρ",
                "seq AUROC@0.3"):
        assert col in lines[0]
    assert "0.812 [0.77, 0.85]" in lines[2] and "0.750" in lines[2] and "0.950" in lines[2]
    assert " 10/79 " in lines[2]  # the negatives the AUROC rests on, beside it
    assert lines[2].count("n/a") == 2  # ρ_s missing, ECE undefined
    assert lines[3].startswith("Token entropy") and lines[3].count("n/a") == 11
    assert len({len(lines[0].split("AUROC")[0]), len(lines[2].split("0.812")[0])}) == 1  # columns aligned


def test_an_interval_wider_than_a_tenth_is_flagged_in_the_table():
    rows = {"SpanUQ": {"span": {"n": 76, "n_pos": 72, "auroc": {"value": 0.559, "ci": [0.15, 1.0]}}},
            "prior": {"span": {"n": 76, "n_pos": 72, "auroc": {"value": 0.6, "ci": [0.55, 0.65]}}}}
    lines = format_table(rows).splitlines()
    assert "0.559 [0.15, 1.00] !" in lines[2] and " 4/76 " in lines[2]
    assert "0.600 [0.55, 0.65]  " in lines[3] + "  " and "!" not in lines[3]  # ±0.05: no mark
    assert lines[-1].startswith("! the 95% interval is wider than ±0.1")
