"""Reference spans for the set decoder: denoising queries, two-stage query selection,
layer refinement, validity-weighted sequence aggregation and shared UCIR matching."""
import pytest
import torch
from test_probe import TINY, synthetic_examples

from spanuq.config import LossConfig
from spanuq.features.dataset import collate
from spanuq.model.calibration import Calibration
from spanuq.model.losses import SetCriterion
from spanuq.model.postprocess import predict
from spanuq.pipeline.cpus import available_cpus
from spanuq.model.probe import SpanUQProbe
from spanuq.model.span_ops import span_iou
from spanuq.model.queries import (build_denoising, dense_proposal_targets, denoising_attn_mask, select_proposals,
                                  span_position_embedding)

torch.set_num_threads(min(2, available_cpus()))
NEW = dict(query_selection="two_stage", refine=True, dn_groups=2, dn_negatives=True)


def forward(model, batch, targets=None):
    return model(batch.h, batch.entropy, batch.mask, batch.lengths, targets=targets)


def test_denoising_attention_mask_blocks_leaks():
    m = denoising_attn_mask(n_match=3, groups=2, group_size=2)
    assert m.shape == (7, 7)
    assert m[:3, 3:].all() and not m[:3, :3].any()  # matching queries never see denoising ones
    assert not m[3:5, :5].any() and m[3:5, 5:].all()  # group 0: matching + itself only
    assert not m[5:, :3].any() and m[5:, 3:5].all() and not m[5:, 5:].any()


def test_denoising_queries_are_jittered_targets():
    targets = [{"spans": torch.tensor([[0.1, 0.3], [0.5, 0.9]])}, {"spans": torch.tensor([[0.2, 0.6]])},
               {"spans": torch.zeros(0, 2)}]
    dn = build_denoising(targets, groups=3, noise=0.4, negatives=True, generator=torch.Generator().manual_seed(0))
    K, size = 2, 4  # K_max spans x (positive, negative)
    assert dn["group_size"] == size and dn["spans"].shape == (3, 3 * size, 2)
    s = dn["spans"]
    assert (s >= 0).all() and (s <= 1).all() and (s[..., 1] > s[..., 0]).all()
    assert dn["padding"][2].all() and dn["padding"][1].sum() == 3 * 2 and not dn["padding"][0].any()
    for b, t in enumerate(targets[:2]):
        for q in (~dn["padding"][b]).nonzero().flatten().tolist():
            gt = t["spans"][dn["target"][b, q]]
            w = float(gt[1] - gt[0])
            shift = (s[b, q] - gt).abs().max()
            if dn["positive"][b, q]:  # each boundary moves less than λ·w/2
                assert shift < 0.4 * w / 2 + 1e-6
            else:  # negatives: between λ·w/2 and 2λ·w/2 (before clamping into [0, 1])
                assert shift < 0.8 * w / 2 + 1e-6
    assert dn["positive"].sum() == dn["target"].ge(0).sum() / 2
    assert build_denoising([{"spans": torch.zeros(0, 2)}], 2, 0.4, False) is None


def test_matching_queries_do_not_see_denoising_queries():
    """Training with denoising queries leaves the matching queries' outputs unchanged."""
    torch.manual_seed(0)
    batch = collate(synthetic_examples(3))
    model = SpanUQProbe(TINY.model_copy(update=NEW), 32).train()  # dropout 0: train mode is deterministic
    with_dn = forward(model, batch, batch.targets)
    without = forward(model, batch)
    assert "dn" in with_dn and "dn" not in without
    for k in ("spans", "validity_logits", "u", "u_seq"):
        torch.testing.assert_close(with_dn[k], without[k], atol=1e-5, rtol=1e-5)
    Q = with_dn["dn"]["meta"]["spans"].shape[1]
    assert Q == 2 * 2 * max(len(t["spans"]) for t in batch.targets)
    r = with_dn["dn"]["rounds"][-1]
    assert r["spans"].shape == (3, Q, 2) and len(r["aux"]) == TINY.dec_layers - 1
    assert "dn" not in forward(model.eval(), batch, batch.targets)  # never at inference


def test_untrained_offsets_return_the_reference():
    """With references, the regression head starts at offset 0: layer 1 predicts its anchor."""
    torch.manual_seed(0)
    model = SpanUQProbe(TINY.model_copy(update={"refine": True}), 32).eval()
    batch = collate(synthetic_examples(2))
    out = forward(model, batch)
    anchors = torch.stack([(torch.arange(8) + 0.5) / 8 - 0.05, (torch.arange(8) + 0.5) / 8 + 0.05], -1)
    torch.testing.assert_close(out["rounds"][0]["aux"][0]["spans"][0], anchors, atol=1e-3, rtol=0)


def test_two_stage_proposals():
    spans = torch.tensor([[0.0, 0.3], [0.02, 0.3], [0.5, 0.7], [0.52, 0.7], [0.9, 1.0]])[None]
    logits = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]])
    mask = torch.ones(1, 5, dtype=torch.bool)
    ref = select_proposals(spans, logits, mask, n=3)
    # NMS keeps one of each overlapping pair, best first
    torch.testing.assert_close(ref[0], spans[0, [0, 2, 4]])
    ref = select_proposals(spans, logits, mask, n=7)  # more queries than tokens: repeated
    assert ref.shape == (1, 7, 2)

    targets = [{"spans": torch.tensor([[0.0, 0.5], [0.25, 0.5]])}]
    pos, tgt = dense_proposal_targets(targets, torch.tensor([4]), 5)
    assert pos.tolist() == [[True, True, False, False, False]]  # centres 0.125, 0.375 inside; padding never
    torch.testing.assert_close(tgt[0, :2], torch.tensor([[0.0, 0.5], [0.25, 0.5]]))  # the shortest containing span


def test_span_position_embedding():
    e = span_position_embedding(torch.rand(2, 5, 2), 16)
    assert e.shape == (2, 5, 16) and torch.isfinite(e).all()
    a, b = span_position_embedding(torch.tensor([[0.1, 0.2], [0.6, 0.7]]), 16)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("switches", [NEW, dict(refine=True), dict(dn_groups=3, ucir=False),
                                      dict(query_selection="two_stage", boundary="pointer")],
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_new_switches_learn_a_toy_set(switches):
    """Shapes, finite losses and a loss that falls over a few steps on learnable spans."""
    torch.manual_seed(0)
    examples = synthetic_examples(4)
    batch = collate(examples)
    model = SpanUQProbe(TINY.model_copy(update=switches), 32).train()
    criterion = SetCriterion(LossConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(18):
        out = forward(model, batch, batch.targets)
        loss, log = criterion(out, batch.targets, phase="warmup" if step < 15 else "joint", lengths=batch.lengths)
        assert torch.isfinite(loss), log
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(log["loss"])
    assert out["spans"].shape == (4, TINY.n_queries, 2)
    assert (out["spans"][..., 1] >= out["spans"][..., 0]).all()
    assert ("loss_enc" in log) == (switches.get("query_selection") == "two_stage")
    assert ("loss_dn" in log) == bool(switches.get("dn_groups"))
    assert sum(losses[12:15]) < 0.85 * sum(losses[:3]), losses  # warm-up loss falls
    assert all(torch.isfinite(torch.tensor(v)) for v in log.values())


@pytest.mark.slow
def test_two_stage_refinement_fits_the_toy_spans():
    """Two-stage + refinement + denoising recovers every span of a learnable toy set."""
    torch.manual_seed(0)
    examples = synthetic_examples(8)
    batch = collate(examples)
    model = SpanUQProbe(TINY.model_copy(update=NEW), 32)
    criterion = SetCriterion(LossConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(300):
        model.train()
        loss, log = criterion(forward(model, batch, batch.targets), batch.targets, phase="warmup",
                              lengths=batch.lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log["loss_giou"] < 0.05 and log["loss_val"] < 0.02:
            break
    preds = predict(model, examples, Calibration(dup_iou=1.0))
    hits = sum(any(float(span_iou(torch.tensor([b, e + 1.0]), torch.tensor([float(s), x + 1.0]))) >= 0.5
                   for s, x in p.spans[p.keep].tolist()) for ex, p in zip(examples, preds)
               for b, e in ex.spans.tolist())
    assert hits == sum(len(e.spans) for e in examples), (step, log)


@pytest.mark.parametrize("weighting", ["validity", "paper"])
def test_invalid_queries_get_no_sequence_weight(weighting):
    torch.manual_seed(0)
    model = SpanUQProbe(TINY.model_copy(update={"seq_weighting": weighting}), 32)
    qt = torch.randn(1, 8, TINY.d_proj)
    logits = torch.full((1, 8), -20.0)
    logits[0, :2] = 5.0  # two valid queries, six with p ≈ 0
    u = torch.tensor([[0.1, 0.2, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]])
    u_seq, w = model.aggregate(qt, logits, u)
    torch.testing.assert_close(w.sum(-1), torch.ones(1))
    if weighting == "validity":
        assert w[0, 2:].sum() < 1e-6 and 0.1 <= float(u_seq.detach()) <= 0.2
    else:  # the paper's softmax(p·imp): the six invalid queries carry most of û_seq
        assert w[0, 2:].sum() > 0.5 and float(u_seq.detach()) > 0.5


def _two_rounds(first: torch.Tensor, second: torch.Tensor) -> dict:
    """Hand-made probe outputs of two UCIR rounds with the given spans (1, N, 2)."""
    def rnd(spans):
        N = spans.shape[1]
        return {"spans": spans, "validity_logits": torch.zeros(1, N), "u": torch.full((1, N), 0.5),
                "pi": torch.ones(1, N, 1), "alpha": torch.ones(1, N, 1), "beta": torch.ones(1, N, 1), "aux": []}
    r1, r2 = rnd(first), rnd(second)
    return {"spans": r2["spans"], "u_seq": torch.zeros(1), "rounds": [r1, r2]}


@pytest.mark.parametrize("shared", [True, False])
def test_ucir_rounds_share_one_assignment(shared):
    """Round 1 has the two spans in swapped queries: with one shared assignment (round 2's)
    query k is trained towards the same span in both rounds, so round 1 pays for the swap."""
    targets = [{"spans": torch.tensor([[0.1, 0.3], [0.6, 0.9]]), "u": torch.tensor([0.2, 0.8]),
                "u_seq": torch.tensor(0.5)}]
    a, b = targets[0]["spans"]
    out = _two_rounds(torch.stack([b, a])[None], torch.stack([a, b])[None])
    crit = SetCriterion(LossConfig(ucir_shared_match=shared, aux=0.0))
    idx = crit.round_indices(out["rounds"], targets, "warmup")
    if shared:
        assert [i.tolist() for i in idx[0][0]] == [i.tolist() for i in idx[1][0]] == [[0, 1], [0, 1]]
    else:
        assert idx[0][0][1].tolist() == [1, 0] and idx[1][0][1].tolist() == [0, 1]
    _, log = crit(out, targets, phase="warmup")
    # round 2 is perfect either way; round 1's regression loss exists only under the shared assignment
    assert log["loss_l1"] < 1e-6
    assert (log["loss_round1"] > 3.0) == shared  # val BCE alone is 2·log 2 ≈ 1.39


def test_checkpoint_round_trip_with_reference_spans(tmp_path):
    from spanuq.model.checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    cfg = TINY.model_copy(update=NEW)
    model = SpanUQProbe(cfg, 32).eval()
    save_checkpoint(model, cfg, 32, tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt").probe
    assert loaded.cfg == cfg
    batch = collate(synthetic_examples(2))
    with torch.inference_mode():
        a, b = forward(model, batch), forward(loaded, batch)
    for k in ("spans", "validity_logits", "u", "u_seq"):
        assert torch.equal(a[k], b[k]), k
