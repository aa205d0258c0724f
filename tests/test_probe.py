"""SpanUQProbe: shapes, ranges, ablations, overfitting a tiny set, checkpoints."""

import pytest
import torch

from spanuq.config import LossConfig, ProbeConfig
from spanuq.features.dataset import ResponseExample, collate
from spanuq.model.calibration import Calibration
from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
from spanuq.model.losses import SetCriterion
from spanuq.model.postprocess import predict
from spanuq.pipeline.cpus import available_cpus
from spanuq.model.probe import SpanUQProbe
from spanuq.model.span_ops import span_iou

torch.set_num_threads(min(2, available_cpus()))
TINY = ProbeConfig(d_proj=64, n_queries=8, n_heads=4, d_ffn=128, dropout=0.0)


def synthetic_examples(n: int = 8, d: int = 32, seed: int = 0) -> list[ResponseExample]:
    """n answers of 20-40 tokens with 2-4 disjoint spans; span tokens carry a marker in the states."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        T = int(torch.randint(20, 41, (1,), generator=g))
        K = int(torch.randint(2, 5, (1,), generator=g))
        cuts = torch.randperm(T - 1, generator=g)[: 2 * K].sort().values
        spans = torch.stack([cuts[0::2], cuts[1::2]], -1)
        u = torch.rand(K, generator=g)
        h = 0.3 * torch.randn(T, d, generator=g)
        for (b, e), uk in zip(spans.tolist(), u.tolist()):
            h[b:e + 1, 0] += 1.0  # inside
            h[b, 1] += 1.0  # start
            h[e, 2] += 1.0  # end
            h[b:e + 1, 3] += uk  # uncertainty signal
        out.append(ResponseExample(f"p{i}", "synthetic", "train", h, torch.rand(T, generator=g),
                                   list(range(T)), spans.long(), u))
    return out


def forward(model, batch):
    return model(batch.h, batch.entropy, batch.mask, batch.lengths)


def test_output_shapes_and_ranges():
    torch.manual_seed(0)
    batch = collate(synthetic_examples(4))
    model = SpanUQProbe(TINY, 32).eval()
    out = forward(model, batch)
    B, N, J = 4, TINY.n_queries, TINY.mob_components
    assert out["spans"].shape == (B, N, 2)
    assert out["validity_logits"].shape == out["u"].shape == out["nu"].shape == (B, N)
    assert out["pi"].shape == out["alpha"].shape == out["beta"].shape == (B, N, J)
    assert out["u_seq"].shape == (B,)
    s = out["spans"]
    assert (s >= 0).all() and (s <= 1).all() and (s[..., 1] >= s[..., 0]).all()
    assert ((out["u"] > 0) & (out["u"] < 1)).all() and ((out["u_seq"] >= 0) & (out["u_seq"] <= 1)).all()
    torch.testing.assert_close(out["seq_weights"].sum(-1), torch.ones(B))
    assert len(out["aux"]) == TINY.dec_layers - 1 and len(out["rounds"]) == 2
    # UCIR: û = 0.7 û(2) + 0.3 û(1)
    r1, r2 = out["rounds"]
    torch.testing.assert_close(out["u"], 0.7 * r2["u"] + 0.3 * r1["u"])


def test_padding_does_not_change_an_example():
    """Each example is normalised by its own length, so batching with longer ones changes nothing."""
    torch.manual_seed(0)
    examples = synthetic_examples(3)
    model = SpanUQProbe(TINY, 32).eval()
    together = forward(model, collate(examples))
    for i, e in enumerate(examples):
        alone = forward(model, collate([e]))
        for k in ("spans", "validity_logits", "u", "u_seq"):
            torch.testing.assert_close(together[k][i], alone[k][0], atol=2e-5, rtol=1e-4)


def test_parameter_count_at_paper_shapes():
    model = SpanUQProbe(ProbeConfig(), d_model=5120)  # Qwen3-14B: paper Tab. A7 reports 27.04M
    n = model.num_parameters()
    assert 20e6 < n < 30e6, n


ABLATIONS = [
    dict(enrichment="add"), dict(enrichment="concat"), dict(enrichment="off"),
    dict(pooling="mean"), dict(uncertainty_head="beta"), dict(ucir=False),
    dict(boundary="pointer"), dict(use_entropy=False), dict(span_skip=True),
    dict(boundary="pointer", enrichment="concat", pooling="mean", uncertainty_head="beta", ucir=False),
]


@pytest.mark.parametrize("switches", ABLATIONS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_ablation_switches_run(switches):
    torch.manual_seed(0)
    cfg = TINY.model_copy(update=switches)
    batch = collate(synthetic_examples(3))
    model = SpanUQProbe(cfg, 32)
    out = forward(model, batch)
    J = 1 if cfg.uncertainty_head == "beta" else cfg.mob_components
    assert out["pi"].shape[-1] == J and len(out["rounds"]) == (2 if cfg.ucir else 1)
    assert (out["spans"][..., 1] >= out["spans"][..., 0]).all()
    loss, log = SetCriterion(LossConfig())(out, batch.targets, phase="joint")
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    predict(model, synthetic_examples(4), Calibration())


def kept_spans(pred) -> list[tuple[int, int]]:
    """The shown spans of one prediction."""
    return [(s.b, s.e) for s in pred.shown()]


def span_recall(examples, preds, iou=0.5) -> float:
    hits = total = 0
    for e, p in zip(examples, preds):
        for b, en in e.spans.tolist():
            total += 1
            hits += any(float(span_iou(torch.tensor([b, en + 1.0]), torch.tensor([s, x + 1.0]))) >= iou
                        for s, x in kept_spans(p))
    return hits / total


def test_overfits_eight_examples():
    torch.manual_seed(0)
    examples = synthetic_examples(8)
    batch = collate(examples)
    model = SpanUQProbe(TINY, 32)
    criterion = SetCriterion(LossConfig())
    # lr 3e-3: at 1e-3 the span regression sits on a plateau (L1 ~0.19) for 450 to 1,300+ steps depending on
    # the CPU's float kernels (AVX2 vs AVX-512 orderings); at 3e-3 it leaves it in 420-490 steps on every seed tried
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(1200):
        loss, log = criterion(forward(model, batch), batch.targets, phase="warmup")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log["loss_l1"] < 0.01 and log["loss_giou"] < 0.05 and log["loss_val"] < 0.02:
            break
    assert log["loss_l1"] < 0.01 and log["loss_giou"] < 0.05 and log["loss_val"] < 0.02, (step, log)
    preds = predict(model, examples, Calibration(dup_iou=1.0))
    assert span_recall(examples, preds, iou=0.5) == 1.0
    for e, p in zip(examples, preds):
        assert all(0 <= s <= x < e.n_tokens for s, x in kept_spans(p))
    # a few joint steps afterwards keep everything finite
    for _ in range(3):
        loss, log = criterion(forward(model, batch), batch.targets, phase="joint")
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.isfinite(torch.tensor(v)) for v in log.values())


def test_the_span_skip_adds_each_spans_own_mean_input_to_its_pooled_content():
    """probe.span_skip: c_k += Σ_t m̃_k(t) W_s x_t. With W_s = 0 the probe is the one without the skip
    (same weights otherwise); with W_s ≠ 0 what a span's own tokens carry reaches its û past the encoder."""
    torch.manual_seed(0)
    batch = collate(synthetic_examples(3))
    plain = SpanUQProbe(TINY, 32).eval()
    skip = SpanUQProbe(TINY.model_copy(update={"span_skip": True}), 32).eval()
    missing, unexpected = skip.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["skip_proj.bias", "skip_proj.weight"] and not unexpected
    with torch.inference_mode():
        torch.nn.init.zeros_(skip.skip_proj.weight)
        torch.nn.init.zeros_(skip.skip_proj.bias)
        a, b = forward(plain, batch), forward(skip, batch)
        for k in ("spans", "validity_logits", "u", "u_seq"):
            torch.testing.assert_close(a[k], b[k])
        torch.nn.init.normal_(skip.skip_proj.weight)
        c = forward(skip, batch)
    torch.testing.assert_close(a["rounds"][0]["spans"], c["rounds"][0]["spans"])  # boundaries come before pooling
    assert not torch.allclose(a["u"], c["u"])
    with pytest.raises(ValueError, match="needs probe.enrichment on"):
        SpanUQProbe(TINY.model_copy(update={"span_skip": True, "enrichment": "off"}), 32)


@pytest.mark.parametrize("switches", [{}, dict(boundary="pointer", enrichment="concat", uncertainty_head="beta"),
                                      dict(span_skip=True)])
def test_checkpoint_round_trip(tmp_path, switches):
    torch.manual_seed(0)
    cfg = TINY.model_copy(update=switches)
    model = SpanUQProbe(cfg, 32).eval()
    batch = collate(synthetic_examples(2))
    save_checkpoint(model, cfg, 32, tmp_path / "ckpt", extra={"epoch": 3, "backbone": "smollm2-135m"})
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    ckpt = load_checkpoint(tmp_path / "ckpt")
    loaded = ckpt.probe
    assert ckpt.extra == {"epoch": 3, "backbone": "smollm2-135m"} and ckpt.d_model == 32
    assert ckpt.calibration == Calibration() and loaded.cfg == cfg
    a, b = model.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with torch.inference_mode():
        oa, ob = forward(model, batch), forward(loaded, batch)
    for k in ("spans", "validity_logits", "u", "nu", "pi", "alpha", "beta", "u_seq"):
        assert torch.equal(oa[k], ob[k]), k


def test_the_same_probe_saved_again_is_the_same_file(tmp_path):
    """DVC names a probe by its bytes: saving one state twice must write one file (the safetensors library lists
    the header's metadata in an order that changes from save to save)."""
    torch.manual_seed(0)
    model = SpanUQProbe(TINY, 32).eval()
    files = set()
    for k in range(8):
        save_checkpoint(model, TINY, 32, tmp_path / str(k))
        files.add((tmp_path / str(k) / "model.safetensors").read_bytes())
    assert len(files) == 1
    loaded = load_checkpoint(tmp_path / "0").probe.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())


def test_standardised_inputs_are_learned_from_training_and_travel_with_the_checkpoint(tmp_path):
    """probe.standardize: [H̄; entropy] is centred and scaled by the training split's statistics,
    so a dimension sitting near 100 (as a few of SmolLM2's do) reads like any other."""
    from spanuq.features.dataset import input_stats

    examples = synthetic_examples(4)
    for e in examples:
        e.h[:, 5] += 100.0
    mean, std = input_stats(examples)
    every = torch.cat([torch.cat([e.h, e.entropy[:, None]], -1) for e in examples])
    torch.testing.assert_close(mean, every.mean(0), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(std, every.std(0, unbiased=False), atol=1e-4, rtol=1e-4)
    assert mean[5] > 99 and mean.shape == (33,)  # 32 state dimensions and the entropy

    torch.manual_seed(0)
    cfg = TINY.model_copy(update={"standardize": True})
    model = SpanUQProbe(cfg, 32)
    model.set_input_stats(mean, std)
    model.eval()
    # shifting and scaling a dimension of the inputs and of its statistics alike changes nothing
    shifted = [ResponseExample(e.prompt_id, e.domain, e.split, e.h.clone(), e.entropy, e.token_ids, e.spans, e.u)
               for e in examples]
    for e in shifted:
        e.h[:, 7] = 3.0 * e.h[:, 7] + 50.0
    twin = SpanUQProbe(cfg, 32)
    twin.load_state_dict(model.state_dict())
    twin.set_input_stats(*input_stats(shifted))
    twin.eval()
    with torch.inference_mode():
        a, b = forward(model, collate(examples)), forward(twin, collate(shifted))
    torch.testing.assert_close(a["u"], b["u"], atol=1e-4, rtol=1e-4)

    save_checkpoint(model, cfg, 32, tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt").probe
    torch.testing.assert_close(loaded.input_mean, mean)
    with torch.inference_mode():
        torch.testing.assert_close(forward(loaded, collate(examples))["u"], a["u"])
    with pytest.raises(ValueError, match="standardize is off"):
        SpanUQProbe(TINY, 32).set_input_stats(mean, std)
