"""Baselines: span pooling, Token Entropy, the oracle-span MLP probe, the registry."""
import json
import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from spanuq.baselines.base import SequenceScorer
from spanuq.baselines.mlp_probe import MLPProbe, pool_span_features, predict_span_mlp, train_span_mlp
from spanuq.baselines.registry import BASELINES, make_baseline
from spanuq.baselines.token_entropy import TokenEntropy
from spanuq.config import load_config
from spanuq.features.dataset import ResponseExample


def synthetic(n: int, d: int = 48, seed: int = 0) -> list[ResponseExample]:
    """Responses whose span u* is a sigmoid of the span's hidden states along one planted direction.

    Entropy is pure noise, unrelated to u*, so Token Entropy should sit near chance.
    """
    g = torch.Generator().manual_seed(seed)
    w = torch.nn.functional.normalize(torch.randn(d, generator=torch.Generator().manual_seed(123)), dim=0)
    out = []
    for i in range(n):
        T = int(torch.randint(30, 60, (1,), generator=g))
        h = torch.randn(T, d, generator=g)
        K = int(torch.randint(1, 6, (1,), generator=g))
        starts = torch.randperm(T // 6, generator=g)[:K].sort().values * 6  # disjoint 1..5-token spans
        lens = torch.randint(1, 6, (K,), generator=g)
        spans = torch.stack([starts, starts + lens - 1], dim=1)
        a = 2.5 * torch.randn(K, generator=g)
        for (b, e), ak in zip(spans.tolist(), a):
            h[b: e + 1] += ak * w
        u = torch.sigmoid(2 * a)
        out.append(ResponseExample(f"p{seed}-{i}", "custom", "train", h.half(), torch.rand(T, generator=g) * 3,
                                   list(range(T)), spans, u, float(u.mean())))
    return out


@pytest.fixture(scope="module")
def data():
    return synthetic(240, seed=0), synthetic(40, seed=1), synthetic(120, seed=2)


def span_auroc(scores: list[np.ndarray], examples) -> float:
    y = np.concatenate([e.u.numpy() for e in examples]) >= 0.5
    return roc_auc_score(y, np.concatenate(scores))


def test_pool_span_features_is_the_mean_over_inclusive_spans():
    h = torch.randn(9, 4).half()
    spans = torch.tensor([[2, 5], [4, 4], [3, 7], [0, 8]])  # one-token and overlapping spans
    got = pool_span_features(h, spans)
    want = torch.stack([h[b: e + 1].float().mean(0) for b, e in spans.tolist()])
    assert got.dtype == torch.float32 and got.shape == (4, 4)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got[1], h[4].float())
    assert pool_span_features(h, torch.zeros(0, 2, dtype=torch.long)).shape == (0, 4)
    with pytest.raises(ValueError, match="not a valid"):
        pool_span_features(h, torch.tensor([[3, 9]]))


def test_token_entropy_is_the_scaled_mean_entropy_of_the_span_tokens(data):
    train, dev, test = data
    te = TokenEntropy()
    with pytest.raises(RuntimeError, match="fit"):
        te.score(test)
    te.fit(train, dev)
    raw = te.raw_scores(test)
    for e, r in zip(test[:10], raw):
        want = [float(e.entropy[b: e_ + 1].mean()) for b, e_ in e.spans.tolist()]
        np.testing.assert_allclose(r, want, rtol=1e-5)
    scaled, flat_raw = np.concatenate(te.score(test)), np.concatenate(raw)
    assert scaled.min() >= 0 and scaled.max() <= 1
    order = np.argsort(flat_raw)
    assert (np.diff(scaled[order]) >= 0).all()  # monotone: AUROC and rho_s unchanged
    inside = (flat_raw > te.scaler.lo) & (flat_raw < te.scaler.hi)
    np.testing.assert_allclose(scaled[inside], (flat_raw[inside] - te.scaler.lo) / (te.scaler.hi - te.scaler.lo))
    train_scaled = np.concatenate(te.score(train))
    assert train_scaled.min() == 0.0 and train_scaled.max() == 1.0


def test_mlp_probe_learns_a_planted_direction_and_beats_token_entropy(data):
    train, dev, test = data
    probe = MLPProbe(seed=0)
    probe.fit(train, dev)
    scores = probe.score(test)
    assert [len(s) for s in scores] == [len(e.spans) for e in test]
    flat = np.concatenate(scores)
    assert flat.min() >= 0 and flat.max() <= 1
    auroc = span_auroc(scores, test)
    assert auroc > 0.9, auroc
    te = TokenEntropy()
    te.fit(train, dev)
    assert auroc > span_auroc(te.score(test), test) + 0.2
    mae = np.abs(flat - np.concatenate([e.u.numpy() for e in test])).mean()
    assert mae < 0.15, mae
    assert probe.model.info["best_epoch"] < probe.model.info["epochs"]


def test_mlp_probe_is_deterministic_for_a_seed_and_holds_out_dev_when_missing(data):
    train, _, test = data
    a, b, c = MLPProbe(seed=3), MLPProbe(seed=3), MLPProbe(seed=4)
    state = torch.random.get_rng_state()
    a.fit(train[:120], [])  # no dev: 15% of train responses held out for early stopping
    assert torch.equal(state, torch.random.get_rng_state())  # caller's RNG untouched
    torch.randn(100)  # a different global RNG state must not matter
    b.fit(train[:120], [])
    c.fit(train[:120], [])
    sa, sb, sc = (np.concatenate(p.score(test)) for p in (a, b, c))
    np.testing.assert_array_equal(sa, sb)
    assert not np.array_equal(sa, sc)
    n_spans = sum(len(e.spans) for e in train[:120])
    assert a.model.info["n_train"] + a.model.info["n_dev"] == n_spans and a.model.info["n_dev"] > 0


def test_functional_core_on_raw_arrays_with_scaled_down_hidden_sizes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 8)).astype(np.float32)
    y = 1 / (1 + np.exp(-3 * X[:, 0]))
    model = train_span_mlp(X[:300], y[:300], None, None, seed=0)  # dev held out from train
    assert [m.out_features for m in model.net if isinstance(m, torch.nn.Linear)] == [16, 8, 1]
    p = predict_span_mlp(model, X[300:])
    assert p.shape == (100,) and roc_auc_score(y[300:] >= 0.5, p) > 0.9
    assert predict_span_mlp(model, np.zeros((0, 8))).shape == (0,)


def test_registry_builds_baselines_from_the_config_and_names_the_known_ones(data):
    cfg = load_config(None, ["train.seed=7", "train.device=cpu"])
    probe = make_baseline("mlp_probe", cfg)
    assert isinstance(probe, MLPProbe) and probe.seed == 7 and probe.device == "cpu" and probe.oracle_spans
    assert make_baseline("mlp_probe", cfg, seed=1).seed == 1
    te = make_baseline("token_entropy", cfg)
    assert isinstance(te, TokenEntropy) and te.granularity == "token" and not te.oracle_spans
    assert set(BASELINES) >= {"mlp_probe", "token_entropy"}
    with pytest.raises(ValueError, match=r"unknown baseline 'entropy'.*mlp_probe.*token_entropy"):
        make_baseline("entropy", cfg)


def test_examples_without_spans_get_empty_arrays(data):
    train, dev, test = data
    empty = ResponseExample("e", "custom", "test", torch.randn(7, 48), torch.rand(7), list(range(7)),
                            torch.zeros(0, 2, dtype=torch.long), torch.zeros(0))
    batch = [test[0], empty, test[1]]
    te, probe = TokenEntropy(), MLPProbe(max_epochs=5)
    for s in (te, probe):
        s.fit(train[:40] + [empty], dev)
        out = s.score(batch)
        assert [len(x) for x in out] == [len(test[0].spans), 0, len(test[1].spans)]
        assert out[1].dtype == np.float64
    assert probe.score([]) == [] and [len(x) for x in probe.score([empty])] == [0]


def test_sequence_scorers_broadcast_one_score_to_every_span(data):
    class Length(SequenceScorer):
        name = "length"

        def score_sequences(self, examples):
            return np.array([min(e.n_tokens / 100, 1.0) for e in examples])

    _, _, test = data
    out = Length().score(test[:5])
    for e, s in zip(test[:5], out):
        assert s.shape == (len(e.spans),) and np.all(s == e.n_tokens / 100)


def test_the_surface_prior_learns_the_cheap_cues_and_nothing_else():
    """Labels that depend only on position and prompt overlap: the prior ranks them; labels that
    depend on the hidden states (planted direction) it cannot see."""
    from spanuq.baselines.surface_prior import SurfacePrior, prompt_overlap

    assert prompt_overlap("Marie Curie", "Who was Marie Curie?") == 1.0
    assert prompt_overlap("Polish physicist", "Who was Marie Curie?") == 0.0
    def answers(n, seed):
        out, prompts, texts = [], {}, {}
        g = np.random.default_rng(seed)
        for i in range(n):
            T = 40
            spans = torch.tensor([[2, 3], [15, 16], [30, 32]])
            late = np.array([0.0, 0.3, 1.0])
            u = torch.tensor(np.clip(0.1 + 0.8 * late + g.normal(0, 0.05, 3), 0, 1), dtype=torch.float32)
            pid = f"s{seed}-{i}"
            out.append(ResponseExample(pid, "custom", "test", torch.randn(T, 8), torch.rand(T), list(range(T)),
                                       spans, u, float(u.mean())))
            prompts[pid], texts[pid] = "Tell me about the Eiffel Tower.", ["Eiffel Tower", "Paris", "1887"]
        return out, prompts, texts

    (train, p1, t1), (test, p2, t2) = answers(40, 0), answers(20, 1)
    prior = SurfacePrior(prompts={**p1, **p2}, span_texts={**t1, **t2})
    prior.fit(train, [])
    assert span_auroc(prior.score(test), test) > 0.95  # position alone explains these labels
    fit_on, hidden = synthetic(60, seed=3), synthetic(40, seed=4)
    blind = SurfacePrior(prompts={}, span_texts={e.prompt_id: ["x"] * len(e.spans) for e in fit_on + hidden})
    blind.fit(fit_on, [])
    assert 0.3 < span_auroc(blind.score(hidden), hidden) < 0.7  # states-only labels: chance for the prior


def test_the_seconds_leave_the_metrics_so_the_same_inputs_write_the_same_bytes():
    from spanuq.baselines.cost import apart_seconds

    metrics = {"n_spans": 254,
               "methods": {"selfcheck_nli": {"span": {"auroc": 0.78},
                                             "cost": {"fit_seconds": 0.1, "added_seconds_per_answer": 2.0,
                                                      "nli_calls_per_answer": 25.0}},
                           "surface_prior": {"span": {"auroc": 0.74}, "cost": {"fit_seconds": 1.2}}},
               "cost": {"spanuq": {"seconds_per_answer": 0.2, "forward_passes_per_answer": 1.0, "n_answers": 61},
                        "decoding": {"backend": "llamacpp", "greedy_seconds_per_answer": 0.5},
                        "ratio": {"end_to_end": 0.1, "added": 0.05}}}
    kept, seconds = apart_seconds(metrics)
    assert "seconds" not in json.dumps(kept) and "ratio" not in kept["cost"]
    assert kept["methods"]["selfcheck_nli"] == {"span": {"auroc": 0.78}, "cost": {"nli_calls_per_answer": 25.0}}
    assert kept["cost"]["decoding"] == {"backend": "llamacpp"} and kept["n_spans"] == 254
    assert seconds["cost"]["ratio"] == {"end_to_end": 0.1, "added": 0.05}
    assert seconds["methods"]["surface_prior"] == {"cost": {"fit_seconds": 1.2}}
    assert seconds["cost"]["spanuq"] == {"seconds_per_answer": 0.2}
