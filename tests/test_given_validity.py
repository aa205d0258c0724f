"""Which spans of a given answer the product shows: the probe carries a given-answer validity
threshold (chosen on Mu-SHROOM validation, `spanuq.bench.mushroom_given`) and `SpanUQ.score`
applies it; an explicit threshold still wins. Real SmolLM2 backbone, random-weight probe."""
from __future__ import annotations

import json
import shutil

from spanuq.bench.mushroom import read_items
from spanuq.model.calibration import Calibration

FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "mushroom"
GIVEN = {"temperature": 2.0, "bias": -0.5, "flag": 0.4, "margin": 0.1}
QUESTION = "Who was Marie Curie?"
ANSWER = ("Marie Curie was a Polish-born physicist who won the Nobel Prize in Physics in 1903 "
          "and the Nobel Prize in Chemistry in 1911, and she lived in Paris.")


def with_calibration(src, dst, **calibration) -> None:
    """A copy of the probe folder ``src`` in ``dst`` with ``calibration`` in its config.json."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "config.json").read_text())
    meta["calibration"] = {**meta["calibration"], **calibration}
    (dst / "config.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def product(scorer, probe, threshold=None):
    """The product on ``probe``'s own settings (as `spanuq bench mushroom`'s headline row builds it),
    sharing the session's backbone."""
    from spanuq import SpanUQ
    from spanuq.model.checkpoint import load_checkpoint

    return SpanUQ(load_checkpoint(probe), scorer.cfg, scorer.model, scorer.tok, probe, threshold, scorer.settings)


def test_a_given_mapping_carries_its_own_validity_threshold_and_an_explicit_one_wins():
    cal = Calibration(validity_threshold=0.9, given={**GIVEN, "validity_threshold": 0.2})
    assert cal.for_source("given").validity_threshold == 0.2
    assert cal.for_source("generated").validity_threshold == 0.9  # own answers keep theirs
    assert Calibration.from_dict(cal.as_dict()) == cal  # stored in config.json and read back
    asked = cal.with_threshold(0.0)  # e.g. SpanUQ.load(threshold=0.0): every query a candidate
    assert asked.for_source("given").validity_threshold == 0.0 == asked.for_source("generated").validity_threshold
    assert Calibration(validity_threshold=0.9, given=GIVEN).for_source("given").validity_threshold == 0.9


def test_score_shows_a_given_answers_spans_at_the_threshold_the_probe_carries(scorer, probe_dir, tmp_path):
    carried, plain = tmp_path / "carried", tmp_path / "plain"
    with_calibration(probe_dir, carried, validity_threshold=0.9, given={**GIVEN, "validity_threshold": 0.2})
    with_calibration(probe_dir, plain, validity_threshold=0.9, given=GIVEN)
    r = product(scorer, carried).score(QUESTION, response=ANSWER)
    assert r.answer_source == "given" and r.validity_threshold == 0.2
    assert r.flag_threshold == GIVEN["flag"]
    # the same spans as the probe without a carried threshold read at 0.2 explicitly
    same = product(scorer, plain, threshold=0.2).score(QUESTION, response=ANSWER)
    assert [(s.start, s.end, s.u) for s in r.spans] == [(s.start, s.end, s.u) for s in same.spans]
    at_09 = product(scorer, plain).score(QUESTION, response=ANSWER)
    assert at_09.validity_threshold == 0.9 and len(at_09.spans) < len(r.spans)  # 0.2 shows more of them
    assert all(s.validity >= 0.2 for s in r.spans) and any(s.validity < 0.9 for s in r.spans)
    # an explicit threshold wins over the carried one
    assert product(scorer, carried, threshold=0.5).score(QUESTION, response=ANSWER).validity_threshold == 0.5


def test_recalibrate_chooses_it_on_mushroom_validation_and_writes_it_into_the_probe(probe_dir, tmp_path, capsys,
                                                                                   repo_root):
    from spanuq.cli import main

    probe = tmp_path / "probe"
    with_calibration(probe_dir, probe, validity_threshold=0.9, given=GIVEN)
    common = ["--probe", str(probe), "--no-progress", "-p", str(repo_root / "params.yaml"),
              "-o", f"paths.data={tmp_path / 'data'}", "-o", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'm.db'}"]
    test_file = FIXTURE / "mushroom.en-tst.fixture.jsonl"
    assert main(["recalibrate", "--mushroom-val", str(test_file), *common]) == 2  # never chosen on test
    assert "validation" in capsys.readouterr().err
    val = FIXTURE / "mushroom.en-val.fixture.jsonl"
    assert main(["recalibrate", "--mushroom-val", str(val), *common]) == 0
    meta = json.loads((probe / "config.json").read_text())
    record = meta["extra"]["given_validity"]
    rows = record["grid"]
    best = max(rows, key=lambda r: (round(r["cor"], 6), round(r["iou"], 6), r["validity_threshold"]))
    assert meta["calibration"]["given"]["validity_threshold"] == record["validity_threshold"] == \
        best["validity_threshold"]
    assert record["n_items"] == len(read_items(val)) and record["file"] == val.name
    assert {k: meta["calibration"]["given"][k] for k in GIVEN} == GIVEN  # the fitted mapping untouched
    assert meta["calibration"]["validity_threshold"] == 0.9  # own answers: as trained


def test_the_shipped_probe_carries_the_threshold_chosen_on_mushroom_validation():
    from spanuq.score.shipped import PROBES

    meta = json.loads((PROBES / "smollm2-135m" / "config.json").read_text())
    chosen = meta["extra"]["given_validity"]
    cal = Calibration.from_dict(meta["calibration"])
    assert cal.for_source("given").validity_threshold == chosen["validity_threshold"]
    assert chosen["chosen_on"].startswith("Mu-SHROOM English validation") and chosen["n_items"] == 50
    card = json.loads((PROBES / "smollm2-135m" / "card.json").read_text())
    assert card["calibration"] == meta["calibration"]
