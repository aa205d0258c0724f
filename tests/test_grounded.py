"""Scoring against sources (``context``) through the API, the service and the CLI: every result says which
characters of which passage it read and which calibration scored it; sources past the budget are read
in windows; bad sources are a clear error and the server stays up (docs/context.md)."""
import json

import httpx
import pytest

from servers import scoring_service
from spanuq.cli import main
from spanuq.score.errors import InputError
from spanuq.score.grounded import combine, read_against, sentence_of, states, words
from spanuq.score.schema import ContextPassage, ScoredSpan, ScoreResult, SourceRead, Timings
from spanuq.score.views import sources_html, sources_lines

QUESTION = "When was the Eiffel Tower completed, and how tall is it?"
EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It was designed by "
          "the company of Gustave Eiffel and completed in 1889 as the entrance to the World's Fair. It is 330 metres "
          "tall.")
LOUVRE = {"id": "louvre", "title": "Louvre", "text": "The Louvre is the world's most-visited art museum, in Paris."}
WRONG = "The Eiffel Tower was completed in 1925 and is 330 metres tall."


def covers_every_character(result, passages) -> bool:
    got = {}
    for r in result.context_read:
        got.setdefault(r.id, []).append((r.start, r.end))
    return all(sorted(got[p["id"]]) and sorted(got[p["id"]])[0][0] == 0 and sorted(got[p["id"]])[-1][1] == len(p["text"])
               for p in passages)


def test_an_answer_scored_against_sources_says_what_it_read_and_how_it_was_calibrated(scorer):
    r = scorer.score(QUESTION, response=WRONG, context=[EIFFEL, LOUVRE])
    assert [p.id for p in r.context] == ["1", "louvre"] and r.context_windows == 1
    assert [(x.id, x.number, x.start, x.end, x.window) for x in r.context_read] == [
        ("1", 1, 0, len(EIFFEL), 0), ("louvre", 2, 0, len(LOUVRE["text"]), 0)]
    # the test probe has no with-sources calibration: scored with the one without, and unverified for it
    assert r.calibration_source == "generated" and r.status == "unverified"
    assert [x.code for x in r.status_reasons] == ["context_uncalibrated"]
    assert r.spans and all(s.passage in ("1", "louvre") for s in r.spans)
    plain = scorer.score(QUESTION, response=WRONG)
    assert plain.context is None and plain.context_read == [] and plain.status == "scored"
    # the sources are in the backbone's input: the same answer's states, hence û, differ
    assert [s.u_raw for s in r.spans] != [s.u_raw for s in plain.spans]


def test_sources_past_the_budget_are_read_in_windows_and_every_character_is_read(scorer, monkeypatch):
    passages = [{"id": f"p{i}", "text": f"Passage {i}. " + EIFFEL} for i in range(5)]
    monkeypatch.setattr(scorer.cfg.score, "context_focus_tokens", 0)  # read every character
    one = scorer.score(QUESTION, response=WRONG, context=passages)
    monkeypatch.setattr(scorer.cfg.score, "context_tokens", 260)
    r = scorer.score(QUESTION, response=WRONG, context=passages)
    assert one.context_windows == 1 and r.context_windows > 1
    assert covers_every_character(r, passages) and {x.window for x in r.context_read} == set(range(r.context_windows))
    assert r.spans and r.timings.backbone_s > 0
    monkeypatch.setattr(scorer.cfg.score, "max_context_windows", 1)
    with pytest.raises(InputError, match="more than 1 windows") as e:
        scorer.score(QUESTION, response=WRONG, context=passages)
    assert e.value.status == 413


def test_the_backbone_answers_with_its_sources_in_one_window(scorer, monkeypatch):
    r = scorer.score(QUESTION, context=[EIFFEL])
    assert r.answer_source == "generated" and r.answer and r.context_windows == 1
    monkeypatch.setattr(scorer.cfg.score, "context_focus_tokens", 0)
    monkeypatch.setattr(scorer.cfg.score, "context_tokens", 200)
    with pytest.raises(InputError, match="must fit in one"):
        scorer.score(QUESTION, context=[EIFFEL] * 4)


OTHERS = ["Domestic cats sleep for about fifteen hours a day, mostly in short naps.",
          "The Great Wall of China is a series of fortifications built across northern China over many centuries.",
          "Mount Everest, on the border of Nepal and China, is Earth's highest mountain above sea level.",
          "The Amazon is the largest rainforest on Earth, spanning nine countries of South America.",
          "Honey bees communicate the direction of flowers to their hive by a waggle dance."]


def test_long_sources_are_focused_on_the_question_and_the_result_says_what_was_read(scorer, monkeypatch):
    passages = OTHERS[:3] + [{"id": "eiffel", "text": EIFFEL}] + OTHERS[3:]
    monkeypatch.setattr(scorer.cfg.score, "context_focus_tokens", 64)
    r = scorer.score(QUESTION, response=WRONG, context=passages)
    assert r.context_focused and r.context_windows == 1 and len(r.context) == 6
    read = {x.id: (x.start, x.end) for x in r.context_read}
    assert read["eiffel"] == (0, len(EIFFEL))  # the passage about the question, whole
    assert len(read) < 6 and all(s.passage in read for s in r.spans)
    assert "focused on the question" in sources_lines(r)[0] and "focused on the question" in sources_html(r)
    # what an answer is read after does not depend on the answer: the backbone's own answer,
    # scored again as its own, reads the same pieces and gets the same û
    own = scorer.score(QUESTION, context=passages)
    again = scorer.score(QUESTION, response=own.answer, answer_source="generated", context=passages)
    assert own.context_read == again.context_read == r.context_read
    assert [s.u for s in again.spans] == pytest.approx([s.u for s in own.spans], abs=1e-4)
    monkeypatch.setattr(scorer.cfg.score, "context_focus_tokens", 0)
    whole = scorer.score(QUESTION, response=WRONG, context=passages)
    assert not whole.context_focused and covers_every_character(whole, [
        {"id": p["id"] if isinstance(p, dict) else str(i), "text": p["text"] if isinstance(p, dict) else p}
        for i, p in enumerate(passages, 1)])


def _span(start, end, u, text="x"):
    return ScoredSpan(start=start, end=end, text=text, b=0, e=0, u=u, u_raw=u, validity=0.9, nu=5.0)


def _result(spans, u_seq, window, passage=None, answer="The tower was completed in 1925 in Paris."):
    passage = window if passage is None else passage
    return ScoreResult(prompt="q", answer=answer, answer_source="given", backbone="b", generator=None, n_tokens=9,
                       truncated=False, u_seq=u_seq, validity_threshold=0.5, flag_threshold=0.5, spans=spans,
                       context=[ContextPassage(id="a", text="The tower was completed in 1889."),
                                ContextPassage(id="b", text="Cats sleep a lot.")],
                       context_read=[SourceRead(id=["a", "b"][passage], number=passage + 1, start=0,
                                                end=[32, 17][passage], window=window)],
                       context_windows=1, timings=Timings(generate_s=None, backbone_s=1.0, probe_s=0.1, total_s=2.0))


def test_windows_combine_by_the_lowest_u_of_each_claim_and_spans_name_their_passage():
    # window 0 holds the passage about the tower, window 1 one about cats
    w0 = _result([_span(27, 31, 0.9, "1925"), _span(35, 40, 0.2, "Paris")], 0.5, 0)
    w1 = _result([_span(27, 31, 0.95, "1925"), _span(35, 40, 0.1, "Paris"), _span(0, 9, 0.3, "The tower")], 0.4, 1)
    merged, where = combine([w0, w1])
    assert [(s.text, s.u) for s in merged.spans] == [("The tower", 0.3), ("1925", 0.9), ("Paris", 0.1)]
    assert where == [1, 0, 1] and merged.u_seq == 0.4 and merged.context_windows == 2
    assert [x.window for x in merged.context_read] == [0, 1]
    assert merged.timings.backbone_s == 2.0
    marked = read_against(merged, where)
    year = marked.spans[1]
    assert year.passage == "a" and year.support == "contradicted"  # the passage speaks of "the tower was completed"
    assert marked.spans[2].support is None  # below the likely-wrong threshold: no mark
    alone = read_against(*combine([_result([_span(27, 31, 0.9, "1925")], 0.5, 0, passage=1)]))
    assert alone.spans[0].passage == "b" and alone.spans[0].support == "unsupported"  # no passage speaks of it


CANAL = ("The Rideau Canal connects Ottawa to Kingston, Ontario. It was opened in 1832 and was built under the "
         "supervision of Lieutenant-Colonel John By of the Royal Engineers. It is 202 kilometres long.")
ELEMENTS = ("Hydrogen was discovered in seventeen sixty-six. The discovery is credited to Henry Cavendish. "
            "Another element, Lithium, was discovered in 1817 by Johann Arfwedson.")


@pytest.mark.parametrize("passage, answer, span, says", [
    (CANAL, "It was opened in 1832 under the supervision of Lieutenant-Colonel John By, and it is 415 km long.",
     "1832", True),  # the passage's sentence about the opening holds the same year
    (CANAL, "It was opened in 1832 under the supervision of Lieutenant-Colonel John By, and it is 415 km long.",
     "415", False),  # that sentence does not hold the length the answer gives
    (ELEMENTS, "Hydrogen was discovered in 1766.", "1766", True),  # in words in the source, read with its digits
    (ELEMENTS, "Hydrogen was discovered in 1817.", "1817", False),  # 1817 is there, but said of lithium
])
def test_a_doubted_span_the_source_states_in_its_sentence_about_it_is_marked_stated(passage, answer, span, says):
    start = answer.index(span)
    own = words(span)
    assert states(passage, own, words(sentence_of(answer, start, start + len(span))) - own) is says


@pytest.mark.parametrize("context, status, message", [
    ([], 422, "empty list"),
    ([EIFFEL, 7], 422, "passage 2 must be a string"),
    ("a string", 422, "context: Input should be a valid list"),
    (["x" * 200_001], 413, "max_context_chars"),
])
def test_bad_sources_are_a_clear_4xx_and_the_server_stays_up(scorer, context, status, message):
    with scoring_service(scorer) as (url, _):
        r = httpx.post(f"{url}/score", json={"prompt": QUESTION, "response": WRONG, "context": context}, timeout=300)
        assert r.status_code == status and message in r.json()["detail"]
        if isinstance(context, str):  # the body's shape is wrong: the whole batch is refused, below the same
            context = [{"text": EIFFEL, "url": "not a passage key"}]
            message = "unknown keys"
        batch = httpx.post(f"{url}/score/batch", json={"items": [
            {"prompt": QUESTION, "response": WRONG, "context": context},
            {"prompt": QUESTION, "response": WRONG, "context": [EIFFEL]}]}, timeout=300).json()["results"]
        assert batch[0]["status"] == status and message in batch[0]["error"]
        assert batch[1]["context_read"][0]["end"] == len(EIFFEL)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_score_refine_and_stream_take_sources(scorer):
    with scoring_service(scorer) as (url, _):
        r = httpx.post(f"{url}/score", json={"prompt": QUESTION, "response": WRONG, "context": [EIFFEL]},
                       timeout=300).json()
        direct = scorer.score(QUESTION, response=WRONG, context=[EIFFEL])
        assert r["context_read"] == [x.model_dump() for x in direct.context_read]
        assert [s["u"] for s in r["spans"]] == pytest.approx([s.u for s in direct.spans], abs=1e-5)
        refined = httpx.post(f"{url}/refine", json={"prompt": QUESTION, "response": WRONG, "context": [EIFFEL],
                                                    "mode": "flag"}, timeout=300).json()
        assert refined["before"]["context_read"] == r["context_read"]
        with httpx.stream("POST", f"{url}/score/stream", json={"prompt": QUESTION, "context": [EIFFEL]},
                          timeout=300) as s:
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
        final = events[-1]["result"]
        assert events[-1]["done"] and final["context_windows"] == 1 and final["context"][0]["text"] == EIFFEL
        again = scorer.score(QUESTION, response=final["answer"], context=[EIFFEL])
        assert [s["u"] for s in final["spans"]] == pytest.approx([s.u for s in again.spans], abs=1e-4)


def test_spanuq_score_reads_context_files_and_a_corpus(probe_dir, repo_root, tmp_path, capsys):
    (tmp_path / "source.txt").write_text(EIFFEL + "\n", encoding="utf-8")
    base = ["score", QUESTION, "--response", WRONG, "--json", "--model", str(probe_dir), "--threshold", "0",
            "-p", str(repo_root / "params.yaml")]
    assert main(base + ["--context", f"@{tmp_path / 'source.txt'}", "--context", "The Louvre is in Paris."]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["text"] for p in out["context"]] == [EIFFEL, "The Louvre is in Paris."]
    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in [
        {"id": "eiffel", "title": "Eiffel Tower", "text": EIFFEL}, LOUVRE,
        {"id": "cats", "text": "Domestic cats sleep for about fifteen hours a day."}]))
    assert main(base + ["--corpus", str(corpus)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context"][0]["id"] == "eiffel" and "cats" not in [p["id"] for p in out["context"]]
    assert (tmp_path / "passages.jsonl.bm25_index").is_dir()  # the label stage's index format, kept


def test_spanuq_score_builds_a_corpus_index_without_debug_lines_on_stderr(tmp_path, repo_root):
    """bm25s logs at DEBUG on its own logger ("Building index from IDs objects"), which the CLI's root handler
    printed on the first build of a --corpus index: the index is built, and stderr holds no such line.
    The probe named does not exist, so the command ends after the sources, before a backbone loads."""
    import os
    import subprocess
    import sys

    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in [{"id": "eiffel", "text": EIFFEL}, LOUVRE]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "spanuq.cli", "score", QUESTION, "--response", WRONG, "--corpus",
                          str(corpus), "--model", str(tmp_path / "no-probe"), "-p", str(repo_root / "params.yaml")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert (tmp_path / "passages.jsonl.bm25_index").is_dir() and "no-probe" in out.stderr, out.stderr
    assert "bm25s" not in out.stderr and "DEBUG" not in out.stderr, out.stderr


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_text("id,text\n1,Paris\n"), "not valid JSON"),
    (lambda p: p.write_text('["a list", "not a passage"]\n'), "a passage is a JSON object"),
    (lambda p: p.write_bytes(b"\xff\xfe\x00binary"), "not a UTF-8 text file"),
])
def test_a_corpus_that_is_not_jsonl_is_a_cli_error_before_the_backbone_loads(tmp_path, capsys, monkeypatch, make,
                                                                              message):
    from spanuq.score.scorer import SpanUQ

    monkeypatch.setattr(SpanUQ, "load", lambda *a, **k: pytest.fail("loaded a model for a bad corpus"))
    corpus = tmp_path / "corpus.jsonl"
    make(corpus)
    assert main(["score", QUESTION, "--response", WRONG, "--corpus", str(corpus)]) == 2
    assert message in capsys.readouterr().err
    assert main(["score", QUESTION, "--response", WRONG, "--context", "a", "--corpus", str(corpus)]) == 2
    assert "not both" in capsys.readouterr().err
