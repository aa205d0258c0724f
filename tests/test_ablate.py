"""`spanuq ablate`: rows are validated config overrides, trained on one split, written as one table."""
import pytest
from test_probe import TINY, synthetic_examples

from spanuq.config import AblateRow, apply_overrides
from spanuq.train.ablate import ablate_rows, format_markdown


def test_row_overrides_are_validated(make_cfg):
    cfg = make_cfg()
    assert apply_overrides(cfg, {"probe.ucir": False, "loss.ucir_shared_match": False}).probe.ucir is False
    assert cfg.probe.ucir is True  # the base config is untouched
    with pytest.raises(ValueError, match="probe.ucri"):
        apply_overrides(cfg, {"probe.ucri": False})
    with pytest.raises(ValueError):
        apply_overrides(cfg, {"probe.boundary": "sideways"})


def test_rows_train_on_the_same_split_and_make_one_table(make_cfg):
    cfg = make_cfg("train.batch_size=4", "evaluate.bootstrap=0", "ablate.warmup_epochs=1", "ablate.joint_epochs=1")
    cfg = cfg.model_copy(update={"probe": TINY})
    rows = [AblateRow(name="paper", set={"probe.seq_weighting": "paper"}),
            AblateRow(name="two-stage", set={"probe.query_selection": "two_stage", "probe.refine": True,
                                             "probe.dn_groups": 1})]
    train, dev, test = synthetic_examples(4, seed=0), synthetic_examples(2, seed=1), synthetic_examples(3, seed=2)
    seen = []
    res = ablate_rows(cfg, rows, train, dev, test, progress=False, on_row=lambda r: seen.append(len(r)))
    assert [r["name"] for r in res] == ["paper", "two-stage"] and seen == [1, 2]
    for r in res:
        assert r["epochs_run"] == 2 and r["train_seconds"] > 0
        assert r["metrics"]["detection"]["n_gt"] == sum(len(e.spans) for e in test)  # every labelled test span
        assert set(r["values"]) == {"AUROC", "MAE", "ρ_s", "P", "R", "F1", "coverage", "mean IoU"}
        assert r["validity_threshold"] in cfg.evaluate.threshold_grid  # chosen on dev, as the train stage does
    md = format_markdown(res, {"backbone": "toy", "n_train": 4, "n_dev": 2, "n_test": 3, "n_test_spans": 9,
                               "iou_threshold": 0.3})
    assert md.count("\n| ") == 3 and "| two-stage |" in md

    # a resumed run keeps the finished rows and trains only the missing or changed ones
    more = rows + [AblateRow(name="three", set={"probe.refine": True})]
    changed = [AblateRow(name="paper", set={"probe.seq_weighting": "validity"})]
    again = ablate_rows(cfg, more, train, dev, test, progress=False, done=res[:1])
    assert again[0] is res[0] and again[1] is not res[1] and again[2]["name"] == "three"
    assert ablate_rows(cfg, changed, train, dev, test, progress=False, done=res)[0] is not res[0]


def test_cross_validation_scores_every_greedy_training_answer_once_and_resumes(make_cfg):
    """`spanuq ablate --cv K`: folds by prompt (a prompt's sample answers stay in its fold), each row
    and the surface prior score every held-out greedy answer once, a finished (fold, row) is kept."""
    from spanuq.train.cv import cv_rows, cv_scores, cv_table, fold_of, row_names

    cfg = make_cfg("train.batch_size=4", "train.warmup_epochs=1", "train.joint_epochs=1")
    cfg = cfg.model_copy(update={"probe": TINY})
    train, dev = synthetic_examples(6, seed=0), synthetic_examples(2, seed=1)
    for i, e in enumerate(train):
        e.prompt_id = f"triviaqa-{i}"
    folds = fold_of([e.prompt_id for e in train], 3)
    assert sorted(folds.values()) == [0, 0, 1, 1, 2, 2]
    rows = cv_rows(cfg, ["default", "probe.ucir=false"])
    assert rows[1].set == {"probe.ucir": False}
    assert row_names("default,span skip off") == ["default", "span skip off"]
    two = cv_rows(cfg, row_names("default; train.batch_size=16,train.joint_epochs=18"))  # one row, two keys
    assert [r.set for r in two] == [{}, {"train.batch_size": 16, "train.joint_epochs": 18}]
    with pytest.raises(ValueError, match="no ablate.rows named"):
        cv_rows(cfg, ["no such row"])
    from spanuq.baselines.surface_prior import SurfacePrior

    prior = SurfacePrior(prompts={e.prompt_id: "Who?" for e in train + dev},
                         span_texts={e.prompt_id: ["Paris"] * len(e.u) for e in train + dev})
    saved = []
    done, scored = cv_scores(cfg, rows, train, dev, 2, on_result=lambda d: saved.append(len(d)), prior=prior)
    assert sorted(e.prompt_id for e in scored) == sorted(e.prompt_id for e in train)
    n_spans = sum(len(e.u) for e in train)
    for name in ("surface prior", "default", "probe.ucir=false"):
        assert sum(len(done[f"{k}/{name}"]["u"]) for k in range(2)) == n_spans  # every span, once
    assert saved[-1] == len(done) == 6
    again, _ = cv_scores(cfg, rows, train, dev, 2, done=done, on_result=lambda d: saved.append("retrained"),
                         prior=prior)
    assert again == done and saved[-1] != "retrained"
    table = cv_table(cfg, rows, done, 2, scored, bootstrap=20)
    assert "| default |" in table and "| probe.ucir=false |" in table and "| surface prior |" in table
