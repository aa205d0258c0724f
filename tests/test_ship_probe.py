"""scripts/ship_probe.py --recalibrated: the shipped weights with a refitted given-answer calibration."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from spanuq.model.checkpoint import calibration_sha256
from spanuq.pipeline.files import sha256_file

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "spanuq" / "probes" / "smollm2-135m"


def ship_probe():
    spec = importlib.util.spec_from_file_location("ship_probe", REPO / "scripts" / "ship_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def shipped_copy(tmp_path):
    out = tmp_path / "probes"
    shutil.copytree(SHIPPED, out / "smollm2-135m")
    return out


def recalibrated(tmp_path, name: str, **own_changes) -> Path:
    """The shipped weights in a folder of their own with a given-answer mapping, as `spanuq recalibrate` writes it."""
    d = tmp_path / name
    d.mkdir()
    shutil.copy2(SHIPPED / "model.safetensors", d / "model.safetensors")
    meta = json.loads((SHIPPED / "config.json").read_text())
    meta["calibration"].update(own_changes)
    meta["calibration"]["given"] = {"temperature": 20.0, "bias": -2.4, "surprisal": 0.33, "context": 0.5, "flag": 0.46}
    (d / "config.json").write_text(json.dumps(meta))
    (d / "recalibration.json").write_text(json.dumps({"given": {"fitted_on": "slots", "slots": 86}}))
    return d


def test_a_recalibrated_probe_replaces_only_the_calibration_and_says_so_on_the_card(tmp_path, shipped_copy):
    new = recalibrated(tmp_path, "recal")
    assert ship_probe().main(["--recalibrated", str(new), "--out", str(shipped_copy)]) == 0
    out = shipped_copy / "smollm2-135m"
    assert json.loads((out / "config.json").read_text())["calibration"]["given"]["surprisal"] == 0.33
    card = json.loads((out / "card.json").read_text())
    old = json.loads((SHIPPED / "card.json").read_text())
    assert card["calibration"]["given"]["surprisal"] == 0.33 and card["recalibrated"]["given"]["slots"] == 86
    assert card["metrics"] == old["metrics"] and card["weights"] == old["weights"]  # same weights, same own answers
    assert card["mushroom"] is None  # figures of the old calibration are not carried over
    assert "0.330·S − 0.500·H₀" in (out / "MODEL_CARD.md").read_text()
    assert sha256_file(out / "test_split.jsonl") == sha256_file(SHIPPED / "test_split.jsonl")


def test_the_card_says_which_spans_of_a_given_answer_are_shown_and_where_that_was_chosen(tmp_path, shipped_copy):
    new = recalibrated(tmp_path, "recal")
    meta = json.loads((new / "config.json").read_text())
    meta["calibration"]["given"]["validity_threshold"] = 0.3
    grid = [{"validity_threshold": v, "iou": 0.2, "cor": c, "spans": 10, "share_flagged": 0.1}
            for v, c in ((0.3, 0.44), (0.9, 0.36))]
    meta["extra"]["given_validity"] = {"validity_threshold": 0.3, "chosen_on": "Mu-SHROOM English validation",
                                       "file": "val.jsonl", "sha256": "ab" * 32, "n_items": 50, "rule": "best Cor",
                                       "grid": grid}
    (new / "config.json").write_text(json.dumps(meta))
    assert ship_probe().main(["--recalibrated", str(new), "--out", str(shipped_copy)]) == 0
    out = shipped_copy / "smollm2-135m"
    card = json.loads((out / "card.json").read_text())
    assert card["given_validity"]["validity_threshold"] == card["calibration"]["given"]["validity_threshold"] == 0.3
    text = (out / "MODEL_CARD.md").read_text()
    assert "spans shown from validity 0.3" in text and "| 0.9 | 0.200 | 0.360 | 10 | 0.10 |" in text
    fit = card["recalibrated"]
    meta["calibration"]["given"]["validity_threshold"] = 0.2  # chosen again: the mapping's fit record stays
    meta["extra"]["given_validity"]["validity_threshold"] = 0.2
    (new / "config.json").write_text(json.dumps(meta))
    (new / "recalibration.json").write_text(json.dumps({"given": {"fitted_on": "slots", "slots": 99}}))  # not read
    assert ship_probe().main(["--recalibrated", str(new), "--out", str(shipped_copy)]) == 0
    card = json.loads((out / "card.json").read_text())
    assert card["recalibrated"] == fit and card["given_validity"]["validity_threshold"] == 0.2
    del meta["calibration"]["given"]["validity_threshold"]  # a refit that dropped it: the card no longer claims it
    (new / "config.json").write_text(json.dumps(meta))
    assert ship_probe().main(["--recalibrated", str(new), "--out", str(shipped_copy)]) == 0
    assert json.loads((out / "card.json").read_text())["given_validity"] is None


def test_it_refuses_a_changed_own_calibration_and_a_bench_of_another_calibration(tmp_path, shipped_copy):
    sp = ship_probe()
    with pytest.raises(SystemExit, match="own-answer calibration differs"):
        sp.main(["--recalibrated", str(recalibrated(tmp_path, "own", validity_threshold=0.5)), "--out", str(shipped_copy)])
    new = recalibrated(tmp_path, "recal")
    planted = tmp_path / "planted.json"  # scored the shipped weights with the shipped (old) calibration
    planted.write_text(json.dumps({"probe": {"sha256": sha256_file(SHIPPED / "model.safetensors"),
                                             "calibration_sha256": calibration_sha256(SHIPPED)}}))
    with pytest.raises(SystemExit, match="another calibration"):
        sp.main(["--recalibrated", str(new), "--planted", str(planted), "--out", str(shipped_copy)])
    assert (shipped_copy / "smollm2-135m" / "config.json").read_bytes() == (SHIPPED / "config.json").read_bytes()


def test_the_same_tensors_saved_again_are_the_shipped_weights_and_changed_ones_are_not(tmp_path, shipped_copy):
    from safetensors.torch import load_file, save_file

    sp = ship_probe()
    state = load_file(str(SHIPPED / "model.safetensors"))
    resaved = recalibrated(tmp_path, "resaved")
    save_file(state, str(resaved / "model.safetensors"), metadata={"version": "2", "format": "spanuq-probe"})
    assert sp.main(["--recalibrated", str(resaved), "--out", str(shipped_copy)]) == 0
    out = shipped_copy / "smollm2-135m"
    assert sha256_file(out / "model.safetensors") == sha256_file(SHIPPED / "model.safetensors")  # the package's bytes
    changed = recalibrated(tmp_path, "changed")
    first = next(iter(state))
    save_file({**state, first: state[first] + 1e-3}, str(changed / "model.safetensors"))
    with pytest.raises(SystemExit, match="other weights"):
        sp.main(["--recalibrated", str(changed), "--out", str(shipped_copy)])


def test_a_with_sources_calibration_alone_keeps_every_figure_read_without_sources(tmp_path, shipped_copy):
    """`spanuq recalibrate --grounded` writes only `calibration.grounded`: the re-shipped card keeps the
    Mu-SHROOM and planted figures (read without sources) and states the with-sources mapping."""
    from spanuq.model.calibration import Calibration
    from spanuq.model.checkpoint import save_calibration
    from spanuq.train.grounded_calibration import with_grounded

    new = tmp_path / "grounded"
    shutil.copytree(SHIPPED, new)
    entry = {"temperature": 3.0, "bias": -2.0, "surprisal": 0.4, "context": 0.2, "flag": 0.55, "fact_spans": True}
    save_calibration(new, with_grounded(Calibration.from_dict(json.loads((SHIPPED / "config.json").read_text())
                                                              ["calibration"]), entry))
    (new / "grounded_calibration.json").write_text(json.dumps({"variant": "surprisal"}))
    assert ship_probe().main(["--recalibrated", str(new), "--out", str(shipped_copy)]) == 0
    out = shipped_copy / "smollm2-135m"
    old, card = (json.loads((d / "card.json").read_text()) for d in (SHIPPED, out))
    assert card["mushroom"] == old["mushroom"] and card["planted"] == old["planted"]
    assert card["grounded"]["calibration"]["given"] == entry and card["grounded"]["fit"]["variant"] == "surprisal"
    shipped, now = (json.loads((d / "config.json").read_text()) for d in (SHIPPED, out))
    assert ({k: v for k, v in now["calibration"].items() if k != "grounded"}
            == {k: v for k, v in shipped["calibration"].items() if k != "grounded"})
    assert "read with their sources (`context`): û = σ(logit(raw)/3.000 − 2.000 + 0.400·S" in (out / "MODEL_CARD.md").read_text()
