"""SetCriterion: phases, ranking pairs, and the detached consistency loss."""
import pytest
import torch

from spanuq.config import LossConfig, ProbeConfig
from spanuq.model.losses import SetCriterion, ranking_pairs
from spanuq.model.matcher import HungarianMatcher
from spanuq.model.probe import SpanUQProbe

SMALL = ProbeConfig(d_proj=32, n_queries=6, n_heads=4, d_ffn=64, dropout=0.0)


def batch(seed=0, d=16):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([20, 12, 16])
    mask = torch.arange(20)[None] < lengths[:, None]
    h = torch.randn(3, 20, d, generator=g) * mask[..., None]
    targets = [
        {"spans": torch.tensor([[0.0, 0.2], [0.3, 0.5], [0.6, 0.9]]), "u": torch.tensor([0.9, 0.05, 0.6])},
        {"spans": torch.zeros(0, 2), "u": torch.zeros(0)},
        {"spans": torch.tensor([[0.25, 0.5], [0.5, 1.0]]), "u": torch.tensor([0.0, 1.0])},
    ]
    for t in targets:
        t["u_seq"] = t["u"].mean() if len(t["u"]) else torch.tensor(0.0)
    return (h, torch.rand(3, 20, generator=g), mask, lengths), targets


def test_warmup_has_only_detection_terms():
    torch.manual_seed(0)
    model = SpanUQProbe(SMALL, 16)
    inputs, targets = batch()
    loss, log = SetCriterion(LossConfig())(model(*inputs), targets, phase="warmup")
    assert {"loss_l1", "loss_giou", "loss_val"} <= set(log)
    assert not {"loss_uq", "loss_rank", "loss_con"} & set(log)
    loss.backward()
    # nothing in the uncertainty head or the aggregation is trained during warm-up
    for name, p in model.named_parameters():
        if name.startswith(("mob.", "importance.")):
            assert p.grad is None or not p.grad.any(), name

    loss, log = SetCriterion(LossConfig())(model(*inputs), targets, phase="joint")
    assert {"loss_uq", "loss_rank", "loss_con", "loss_aux", "loss_round1"} <= set(log)
    assert torch.isfinite(loss)


def test_total_is_the_weighted_sum():
    """With aux = 0, no UCIR, warm-up: total = reg·(L1 + giou·GIoU) + val·BCE."""
    torch.manual_seed(0)
    model = SpanUQProbe(SMALL.model_copy(update={"ucir": False}), 16)
    inputs, targets = batch()
    cfg = LossConfig(aux=0.0, reg=3.0, giou=2.0, val=0.5)
    loss, log = SetCriterion(cfg)(model(*inputs), targets, phase="warmup")
    expected = 3.0 * (log["loss_l1"] + 2.0 * log["loss_giou"]) + 0.5 * log["loss_val"]
    assert abs(loss.item() - expected) < 1e-4


def test_ranking_pairs_stratified_and_fallback():
    # sequence 0: two high (> .3) and two low (< .1) -> the 4 (high, low) pairs
    # sequence 1: only one low span -> top-25% vs bottom-25% (k = 8 // 4 = 2)
    # sequence 2: a single span -> no pair; sequence 3: all equal -> no pair
    u = [torch.tensor([0.9, 0.05, 0.5, 0.0, 0.2]),
         torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.35, 0.05]),
         torch.tensor([0.7]),
         torch.tensor([0.2, 0.2, 0.2, 0.2])]
    pairs = ranking_pairs(u, tau_hi=0.3, tau_lo=0.1)
    assert sorted(p for p in pairs if p[0] == 0) == [(0, 0, 1), (0, 0, 3), (0, 2, 1), (0, 2, 3)]
    assert sorted(p for p in pairs if p[0] == 1) == [(1, 0, 6), (1, 0, 7), (1, 1, 6), (1, 1, 7)]
    assert not [p for p in pairs if p[0] in (2, 3)]
    assert all(u[b][i] > u[b][j] for b, i, j in pairs)


def test_rank_loss_value_and_pair_cap():
    crit = SetCriterion(LossConfig(rank_margin=0.1, rank_max_pairs=256))
    # one sequence, queries 0..3 matched to targets 0..3 (identity)
    targets = [{"u": torch.tensor([0.9, 0.8, 0.05, 0.0])}]
    indices = [(torch.arange(4), torch.arange(4))]
    u_hat = torch.tensor([[0.5, 0.9, 0.45, 0.0]])
    # pairs (0,2),(0,3),(1,2),(1,3): hinge max(0, .1 - (û_i - û_j)) = .05, 0, 0, 0
    torch.testing.assert_close(crit.rank_loss(u_hat, targets, indices), torch.tensor(0.05 / 4))
    # many pairs: capped at rank_max_pairs, reproducibly for a seed
    g = torch.Generator().manual_seed(0)
    targets = [{"u": torch.cat([torch.full((20,), 0.9), torch.full((20,), 0.0)])}]
    indices = [(torch.arange(40), torch.arange(40))]
    u_hat = torch.rand(1, 40, generator=g)
    small = SetCriterion(LossConfig(rank_max_pairs=10), seed=3)
    a = small.rank_loss(u_hat, targets, indices)
    b = SetCriterion(LossConfig(rank_max_pairs=10), seed=3).rank_loss(u_hat, targets, indices)
    assert torch.equal(a, b) and len(ranking_pairs([targets[0]["u"]])) == 400


def test_consistency_loss_trains_only_the_importance_mlp():
    torch.manual_seed(0)
    model = SpanUQProbe(SMALL, 16)
    inputs, targets = batch()
    only_con = LossConfig(reg=0.0, val=0.0, uq=0.0, rank=0.0, aux=0.0, con=1.0)
    loss, log = SetCriterion(only_con)(model(*inputs), targets, phase="joint")
    assert log["loss_con"] > 0
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["importance.weight"] is not None and grads["importance.weight"].abs().sum() > 0
    for name, gr in grads.items():
        if not name.startswith("importance."):
            assert gr is None or not gr.any(), f"L_con leaked into {name}"


def test_matcher_ignores_uncertainty_in_warmup():
    outputs = {"spans": torch.tensor([[[0.0, 0.5], [0.0, 0.5]]]), "validity_logits": torch.zeros(1, 2),
               "u": torch.tensor([[0.0, 1.0]])}
    targets = [{"spans": torch.tensor([[0.0, 0.5]]), "u": torch.tensor([1.0])}]
    m = HungarianMatcher(cost_u=10.0)
    assert m(outputs, targets, with_uncertainty=True)[0][0].tolist() == [1]
    C = m.cost_matrix(outputs, targets, with_uncertainty=False)[0]
    assert C[0, 0] == C[1, 0]


@pytest.mark.parametrize("phase", ["warmup", "joint"])
def test_batch_without_any_target_is_finite(phase):
    torch.manual_seed(0)
    model = SpanUQProbe(SMALL, 16)
    inputs, _ = batch()
    empty = [{"spans": torch.zeros(0, 2), "u": torch.zeros(0), "u_seq": torch.tensor(0.0)} for _ in range(3)]
    loss, log = SetCriterion(LossConfig())(model(*inputs), empty, phase=phase)
    assert torch.isfinite(loss)
    loss.backward()
