"""A few probes read as one: member 0 finds the spans, every member scores them (train.members)."""
import numpy as np
import pytest
import torch

from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
from spanuq.model.ensemble import ProbeEnsemble, member_reading
from spanuq.model.postprocess import predict
from spanuq.model.probe import SpanUQProbe
from spanuq.train.members import compact, member_seeds, train_members
from test_probe import TINY, synthetic_examples
from test_train import _cfg


def probe(seed: int) -> SpanUQProbe:
    torch.manual_seed(seed)
    return SpanUQProbe(TINY, 32).eval()


def test_a_member_scores_a_span_by_its_overlapping_valid_queries_else_by_its_answer_score():
    spans = torch.tensor([[[0.0, 0.2], [0.5, 0.6], [0.9, 1.0]]])  # member 0's three queries
    member = {"spans": torch.tensor([[[0.0, 0.2], [0.0, 0.1], [0.5, 0.6]]]),
              "validity_logits": torch.tensor([[0.0, 0.0, -40.0]]),  # p = 0.5, 0.5, ~0
              "u": torch.tensor([[0.8, 0.2, 0.9]]), "u_seq": torch.tensor([0.3])}
    u = member_reading(spans, member)[0]
    # query 0: IoU 1 with a (p .5, û .8) and 0.5 with b (p .5, û .2): (0.5·0.8 + 0.25·0.2) / 0.75
    assert u[0].item() == pytest.approx((0.5 * 0.8 + 0.25 * 0.2) / 0.75)
    assert u[1].item() == pytest.approx(0.3)  # only a query of p ≈ 0 overlaps: the member's û_seq
    assert u[2].item() == pytest.approx(0.3)  # nothing overlaps: the member's û_seq


def test_the_ensemble_shows_member_zeros_spans_with_the_members_mean_reading():
    items = synthetic_examples(3, seed=2)
    one, two = probe(0), probe(1)
    ens = ProbeEnsemble([one, two]).eval()
    from spanuq.model.calibration import Calibration

    a, e = predict(one, items, Calibration()), predict(ens, items, Calibration())
    for pa, pe in zip(a, e):
        assert np.array_equal(pa.spans, pe.spans) and np.array_equal(pa.validity, pe.validity)
        assert np.array_equal(pa.keep, pe.keep)
        assert not np.allclose(pa.u_raw, pe.u_raw)  # the second member reads too
    alone = predict(ProbeEnsemble([one]).eval(), items, Calibration())
    assert all(np.allclose(x.u_raw, y.u_raw) and x.u_seq == pytest.approx(y.u_seq) for x, y in zip(a, alone))
    with pytest.raises(RuntimeError, match="reads"):
        ens.train()(torch.zeros(1, 4, 32), None, torch.ones(1, 4, dtype=torch.bool), torch.tensor([4]))


def test_an_ensemble_checkpoint_is_one_safetensors_file_and_loads_back(tmp_path):
    items = synthetic_examples(2, seed=3)
    ens = ProbeEnsemble([probe(0), probe(1), probe(2)]).eval()
    save_checkpoint(ens, TINY, 32, tmp_path / "probe")
    loaded = load_checkpoint(tmp_path / "probe")
    assert isinstance(loaded.probe, ProbeEnsemble) and len(loaded.probe.members) == 3
    from spanuq.model.calibration import Calibration

    x, y = predict(ens, items, Calibration()), predict(loaded.probe, items, Calibration())
    assert all(np.array_equal(p.u_raw, q.u_raw) for p, q in zip(x, y))
    assert [p.name for p in (tmp_path / "probe").iterdir()] and not list((tmp_path / "probe").glob("*.pt"))
    single = load_checkpoint(save_checkpoint(probe(0), TINY, 32, tmp_path / "single"))
    assert isinstance(single.probe, SpanUQProbe)


def test_members_are_trained_in_processes_of_their_own_from_seeds_no_other_ensemble_shares(make_cfg, tmp_path):
    assert member_seeds(0, 3) == [0, 1, 2] and member_seeds(1, 3) == [3, 4, 5] and member_seeds(7, 1) == [7]
    cfg = _cfg(make_cfg, warmup_epochs=1, joint_epochs=1, patience=10, members=2, num_threads=1)
    train, dev = synthetic_examples(8), synthetic_examples(4, seed=1)
    model, info = train_members(cfg, train, dev, progress=False)
    assert isinstance(model, ProbeEnsemble) and [m["seed"] for m in info["members"]] == [0, 1]
    assert not torch.equal(model.members[0].query_embed, model.members[1].query_embed)
    # member 1 is what seed 1 trains alone in a fresh process (this process's torch may have chosen other
    # CPU kernels before an earlier test pinned them: the workers read the pins, it cannot)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from spanuq.train.members import train_member

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        alone = pool.submit(train_member, cfg, 1, 1, train, dev, str(tmp_path / "alone")).result()
    assert alone["seed"] == 1 and alone["epochs_run"] == info["members"][1]["epochs_run"]
    got, want = model.members[1].state_dict(), load_checkpoint(tmp_path / "alone").probe.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_what_a_member_is_sent_is_its_examples_not_the_shards_they_are_sliced_from():
    """A feature store's items are slices of one memory-mapped shard: pickled to a member's process as they
    are, each would carry the whole shard (600 training answers: 24 GB, and the OOM killer)."""
    import pickle
    from dataclasses import replace

    shard = torch.randn(5000, 32)
    items = [replace(e, h=shard[100 * i: 100 * i + e.n_tokens]) for i, e in enumerate(synthetic_examples(4))]
    sent = compact(items)
    assert all(torch.equal(a.h, b.h) and torch.equal(a.u, b.u) for a, b in zip(items, sent))
    assert sum(e.h.untyped_storage().nbytes() for e in sent) == sum(e.h.numel() * 4 for e in items)
    assert len(pickle.dumps(sent)) < len(pickle.dumps(items[0]))  # all four weigh less than one slice did


def test_the_report_says_what_each_member_reads_alone():
    from spanuq.report.tables import members_note

    assert members_note({"span": {}}) == []  # one probe: nothing to say
    line, = members_note({"members_alone": {"seeds": [4, 5, 6, 7], "span_auroc": [0.741, 0.79, 0.77, 0.78]}})
    assert "4 probes (training seeds 4, 5, 6, 7)" in line and "0.741–0.790" in line
