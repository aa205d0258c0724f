"""A probe with a reader beside it scores every answer that comes with sources through the reader: all of the
sources read, spans of names, numbers and content words (never a function word alone, never one twice), each
naming its passage, calibrated by the reader's with-sources calibration."""
import json
import shutil

import pytest

from spanuq.pipeline.cpus import available_cpus
from spanuq.reader.spans import kind

QUESTION = "When did the Golden Gate Bridge open, and what colour is it?"
SOURCE = {"id": "ggb", "title": "Golden Gate Bridge",
          "text": "The Golden Gate Bridge is a suspension bridge in San Francisco. It opened in 1937. Its main span is "
                  "1,280 metres long, and it is painted International Orange."}
OTHER = "The Louvre is the world's most-visited art museum, in Paris."
ANSWER = "The Golden Gate Bridge opened in 1925 and is painted International Orange."


@pytest.fixture(scope="module")
def sourced(probe_dir, tiny_reader, tmp_path_factory, repo_root):
    """`SpanUQ` on the test probe with the tiny reader copied beside it (``<probe>/reader``)."""
    from spanuq import SpanUQ
    from spanuq.config import load_config

    folder = tmp_path_factory.mktemp("probe-with-reader") / "probe"
    shutil.copytree(probe_dir, folder)
    shutil.copytree(tiny_reader[0], folder / "reader")
    cache = tmp_path_factory.mktemp("sourced")
    cfg = load_config(repo_root / "params.yaml", [f"paths.data={cache / 'data'}", f"paths.cache={cache / 'cache'}",
                                                  "score.max_new_tokens=24", f"score.server_threads={available_cpus()}"])
    with SpanUQ.load(folder, cfg=cfg, threshold=0.0) as uq:
        yield uq


def test_an_answer_with_sources_is_read_whole_by_the_reader_and_calibrated_for_sources(sourced):
    r = sourced.score(QUESTION, response=ANSWER, context=[SOURCE, OTHER])
    assert r.calibration_source == "given+context" and r.status == "scored"
    assert [(x.id, x.start, x.end) for x in r.context_read] == [("ggb", 0, len(SOURCE["text"])), ("2", 0, len(OTHER))]
    assert r.context_windows == 1 and not r.context_focused
    assert r.flag_threshold == sourced.reader.calibration["given"]["flag"]
    texts = [s.text for s in r.spans]
    assert "in 1925" in texts and "International Orange" in texts
    assert all(kind(w) != "linking" for t in texts for w in t.split()) and "is" not in " ".join(texts).split()
    assert len({(s.start, s.end) for s in r.spans}) == len(r.spans)  # no span twice
    assert all(s.passage in ("ggb", "2") and s.nu is None and ANSWER[s.start:s.end] == s.text for s in r.spans)
    assert r.u_seq == max(s.u for s in r.spans)
    plain = sourced.score(QUESTION, response=ANSWER)  # without sources: the probe, as before
    assert plain.calibration_source != "given+context" and plain.context is None


def test_sources_longer_than_the_backbone_could_read_in_windows_are_read_whole(sourced, monkeypatch):
    monkeypatch.setattr(sourced.cfg.score, "context_tokens", 200)
    monkeypatch.setattr(sourced.cfg.score, "max_context_windows", 1)  # the backbone's limit: the reader has none
    many = [{"id": f"p{i}", "text": f"Passage {i}. " + SOURCE["text"]} for i in range(8)]
    r = sourced.score(QUESTION, response=ANSWER, context=many)
    assert [(x.id, x.end) for x in r.context_read] == [(p["id"], len(p["text"])) for p in many]


def test_the_backbones_own_answer_with_sources_says_whether_its_calibration_was_fitted(sourced):
    r = sourced.score(QUESTION, context=[SOURCE])
    assert r.answer_source == "generated" and r.answer
    if "generated" in sourced.reader.calibration:
        assert r.calibration_source == "generated+context" and r.status == "scored"
    else:  # a reader trained without the backbone's own answers cannot say what its reading means for them
        assert r.status == "unverified" and [x.code for x in r.status_reasons] == ["context_uncalibrated"]


def test_bench_real_reads_the_products_own_output_beside_the_controls(sourced, tmp_path, repo_root):
    from spanuq.bench.real_run import run_real
    from spanuq.config import load_config

    cfg = load_config(repo_root / "params.yaml", [f"paths.data={tmp_path}"])
    out = run_real(cfg, probe=str(sourced.checkpoint), parts=("marked", "swaps", "passages"), limit=3, bootstrap=20)
    record = json.loads(out.read_text())
    marked = record["marked"]
    assert marked["items"] == 3 and marked["n_errors"] == 0 and marked["statuses"] == {"scored": 3}
    assert set(marked["table"]) == {"spanuq", "absent", "surprisal", "tagger", "whole"}
    assert marked["table"]["whole"]["word_auroc"]["value"] == 0.5
    assert all(0 <= marked["table"][m]["iou"]["value"] <= 1 for m in marked["table"])
    assert set(record["swaps"]) <= {"qa", "sentence", "aside"} and record["passages"]["spans"] > 0
    assert set(record["seconds"]) == {"marked", "swaps", "passages"}
    assert "words absent from the sources" in out.with_suffix(".md").read_text()
    again = run_real(cfg, probe=str(sourced.checkpoint), parts=("marked",), limit=3, bootstrap=20)  # from the cache
    assert json.loads(again.read_text())["marked"]["table"] == marked["table"]


def test_a_reader_that_reads_the_backbones_readings_takes_them_from_the_scorers_backbone(sourced, monkeypatch):
    from spanuq.reader.features import READER_FEATURES
    from spanuq.reader.model import NetConfig, ReaderNet
    from spanuq.reader.read import Reader

    assert sourced.reader.backbone.model is sourced.model and sourced.reader.backbone.tok is sourced.tok
    net = ReaderNet(NetConfig(features=list(READER_FEATURES), extra={"calibration": sourced.reader.calibration}))
    monkeypatch.setattr(sourced, "reader", Reader(net, backbone=sourced.reader.backbone))
    r = sourced.score(QUESTION, response=ANSWER, context=[SOURCE])
    assert r.status == "scored" and r.calibration_source == "given+context" and r.spans
