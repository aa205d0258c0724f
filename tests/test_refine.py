"""`SpanUQ.refine`: flag, drop or regenerate the spans whose û is above a threshold.

The session's scorer is the real SmolLM2 backbone (llama.cpp generation) with a random-weight
probe and validity threshold 0, so every answer has spans; their û mean nothing, which is why
these tests check what refine must do whatever the scores (`tests/test_score.py` has the setup).
"""
import httpx
import pytest
from test_serve import service  # noqa: F401 - the real service on a loopback port, a fixture

from spanuq.score.refine import apply_edits, region_u
from spanuq.score.scorer import InputError

PROMPT = "What is the capital of Australia?"
ANSWER = "Canberra is the capital of Australia. It was founded in 1913, and its lake is named after Walter Griffin."


def test_flag_marks_the_spans_above_the_threshold_and_changes_nothing(scorer):
    r = scorer.refine(PROMPT, ANSWER, mode="flag", threshold=0.5)
    assert r.answer == r.answer_before == ANSWER and r.after == r.before and r.generations == 0
    assert r.spans and [s.action for s in r.spans] == ["flagged" if s.u > 0.5 else "kept" for s in r.before.spans]
    assert all(ANSWER[s.start:s.end] == s.text for s in r.spans)
    none = scorer.refine(PROMPT, ANSWER, mode="flag", threshold=1.0)
    assert {s.action for s in none.spans} == {"kept"}


def test_drop_removes_the_sentences_of_uncertain_spans_and_keeps_the_rest_verbatim(scorer):
    before = scorer.score(PROMPT, ANSWER)
    threshold = sorted(s.u for s in before.spans)[len(before.spans) // 2]  # about half the spans are above
    r = scorer.refine(PROMPT, ANSWER, mode="drop", threshold=threshold)
    first, second = ANSWER.split(". ", 1)
    first += "."

    def sentence(span):
        return 0 if span.start < len(first) else 1

    hit = [any(s.u > threshold and sentence(s) == k for s in before.spans) for k in (0, 1)]
    assert r.answer == " ".join(t for t, h in zip((first, second), hit) if not h)
    for s in r.spans:
        assert s.action == ("dropped" if hit[sentence(s)] else "kept")
        assert (s.new_text is None) == (s.action == "dropped")
    assert (r.after is None) == (r.answer == "")
    if r.after is not None:
        assert r.after.answer == r.answer


def test_drop_everything_leaves_an_empty_answer_and_no_after_score(scorer):
    r = scorer.refine(PROMPT, ANSWER, mode="drop", threshold=0.0)
    assert r.answer == "" and r.after is None and {s.action for s in r.spans} == {"dropped"}


def _refine_settings(scorer, monkeypatch, **kw):
    score = scorer.cfg.score.model_copy(update={"refine_candidates": 3, "refine_max_regions": 1,
                                                "refine_max_new_tokens": 16, **kw})
    monkeypatch.setattr(scorer, "cfg", scorer.cfg.model_copy(update={"score": score}))


def test_regenerate_keeps_a_candidate_only_when_the_probe_finds_it_more_certain(scorer, monkeypatch):
    _refine_settings(scorer, monkeypatch)
    answer = ANSWER.replace("Canberra", "Zorblax")  # a first span none of the backbone's samples repeats
    r = scorer.refine(PROMPT, answer, mode="regenerate", threshold=0.0)
    assert r.generations == 3 and 1 <= r.candidates_scored <= 3
    first = r.before.spans[0]  # the one region: from the first span to the end of its sentence
    prefix, end = answer[:first.start].rstrip(), answer.index(".", first.start) + 1
    if r.answer == answer:
        assert {s.action for s in r.spans} == {"unchanged"}
    else:
        new = next(s.new_text for s in r.spans if s.action == "regenerated")
        assert r.answer == prefix + new + answer[end:]  # the rest of the answer is kept as it was
        at = len(prefix)
        assert region_u(r.after, at, at + len(new)) < region_u(r.before, first.start, end)
        assert r.after.answer == r.answer


def _says(scorer, monkeypatch, continuations):
    """The backbone's continuations fixed, to read refine's agreement rule on known samples."""
    monkeypatch.setattr(scorer, "sample", lambda texts, n, *a, **k: [continuations[:n] for _ in texts])


def test_a_region_the_backbones_samples_repeat_is_kept_without_scoring_a_candidate(scorer, monkeypatch):
    _refine_settings(scorer, monkeypatch, refine_margin=0.0)
    _says(scorer, monkeypatch, ["Canberra is the capital of Australia. More text."] * 3)
    answer = "Canberra is the capital of Australia."
    r = scorer.refine(PROMPT, answer, mode="regenerate", threshold=0.0)
    assert r.answer == answer and r.candidates_scored == 0
    assert {s.action for s in r.spans} == {"unchanged"}


def test_no_candidate_wins_where_the_backbones_samples_disagree(scorer, monkeypatch):
    _refine_settings(scorer, monkeypatch, refine_margin=0.0)
    _says(scorer, monkeypatch, ["Sydney is the capital of Australia.", "Melbourne is its capital city.",
                                "Perth has been the seat of government."])
    answer = "Darwin is the capital of Australia."
    r = scorer.refine(PROMPT, answer, mode="regenerate", threshold=0.0)
    assert r.candidates_scored == 3  # each was scored, none was repeated by the others
    assert r.answer == answer and {s.action for s in r.spans} == {"unchanged"}


def test_a_candidate_the_samples_agree_on_can_replace_the_region(scorer, monkeypatch):
    from spanuq.score.refine import support

    said = ["Canberra is the capital of Australia."] * 3
    assert support("Canberra", said) == 1.0 and support("capital of Australia", said[:1] + ["Perth."] * 2) == 1 / 3
    _refine_settings(scorer, monkeypatch, refine_margin=0.0)
    _says(scorer, monkeypatch, said)
    answer = "Darwin is the capital of Australia."
    r = scorer.refine(PROMPT, answer, mode="regenerate", threshold=0.0)
    assert r.candidates_scored == 1  # the three samples are one candidate
    first = min(s.start for s in r.before.spans)
    prefix = answer[:first].rstrip()
    candidate = prefix + " " * bool(prefix) + said[0]
    u = region_u(scorer.score(PROMPT, candidate), len(prefix), len(candidate))
    more_certain = u is not None and u <= region_u(r.before, first, len(answer))
    assert r.answer == (candidate if more_certain else answer)


def test_sample_continues_a_text_with_either_generator(scorer, monkeypatch):
    from spanuq.llm.loading import chat_prompt

    chat = chat_prompt(scorer.tok, PROMPT, scorer.system_prompt) + "The capital of Australia is"
    for generator in ("llamacpp", "hf"):
        monkeypatch.setattr(scorer, "generator", generator)
        side = scorer.tok.padding_side
        out = scorer.sample([chat], 2, 8, seed=3)
        assert len(out) == 1 and len(out[0]) == 2 and all(isinstance(t, str) for t in out[0])
        assert scorer.tok.padding_side == side  # the teacher-forced passes see the tokenizer as before


@pytest.mark.parametrize("kw, message", [
    ({"mode": "rewrite"}, "unknown refine mode"),
    ({"threshold": 1.5}, r"û lies in \[0, 1\]"),
    ({"prompt": ""}, "the prompt is empty"),
    ({"response": "  "}, "the response is empty"),
])
def test_bad_input_is_a_clear_error_before_any_model_call(scorer, monkeypatch, kw, message):
    def no_model_call(*a, **k):
        raise AssertionError("the model was called")

    monkeypatch.setattr(scorer, "score_many", no_model_call)
    monkeypatch.setattr(scorer, "sample", no_model_call)
    args = {"prompt": PROMPT, "response": ANSWER, "mode": "drop", "threshold": 0.5} | kw
    with pytest.raises(InputError, match=message) as e:
        scorer.refine(args.pop("prompt"), args.pop("response"), **args)
    assert e.value.status == 422


def test_the_refine_view_says_who_wrote_the_answer_and_what_refining_cost(scorer):
    from spanuq.score.refine_command import refine_view

    r = scorer.refine(PROMPT, mode="drop", threshold=0.0)  # the backbone writes the answer, then it is refined
    view = refine_view(r, colour_on=False)
    assert "0 backbone generations" not in view
    assert view.startswith(f"the answer: generated by {scorer.backbone_name} (llamacpp); mode drop")
    assert "refining: 0 more backbone generations" in view
    given = refine_view(scorer.refine(PROMPT, ANSWER, mode="flag", threshold=0.5), colour_on=False)
    assert given.startswith("the answer: given; mode flag")


def test_regenerating_warns_of_nothing(scorer):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer.generator = "hf"
        try:
            scorer.refine(PROMPT, ANSWER, mode="regenerate", threshold=0.0)
        finally:
            scorer.generator = "llamacpp"
    assert [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))] == []


def test_edits_replace_ranges_and_say_where_their_new_text_lies():
    text, placed = apply_edits("one two three four", [(8, 13, "3"), (0, 3, "ONE!")])
    assert text == "ONE! two 3 four" and [text[a:b] for a, b in placed] == ["ONE!", "3"]


def test_the_service_refines_and_rejects_a_bad_mode(service, scorer):
    r = httpx.post(f"{service}/refine", json={"prompt": PROMPT, "response": ANSWER, "mode": "flag",
                                              "threshold": 0.5}, timeout=300)
    assert r.status_code == 200, r.text
    direct = scorer.refine(PROMPT, ANSWER, mode="flag", threshold=0.5)
    assert [(s["start"], s["action"]) for s in r.json()["spans"]] == [(s.start, s.action) for s in direct.spans]
    bad = httpx.post(f"{service}/refine", json={"prompt": PROMPT, "mode": "rewrite"}, timeout=30)
    assert bad.status_code == 422 and "unknown refine mode" in bad.json()["detail"]
    assert httpx.post(f"{service}/score", json={"prompt": PROMPT, "response": ANSWER}, timeout=300).status_code == 200


def test_refine_command_prints_before_and_after(probe_dir, tmp_path, capsys):
    import json

    from spanuq.cli import main

    rc = main(["refine", PROMPT, "--response", ANSWER, "--mode", "flag", "--u-threshold", "0.5", "--json",
               "--model", str(probe_dir), "--threshold", "0", "-o", f"paths.data={tmp_path}"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "flag" and out["answer"] == ANSWER and out["spans"]
    with pytest.raises(SystemExit):
        main(["refine", PROMPT, "--mode", "rewrite"])
    assert "invalid choice: 'rewrite'" in capsys.readouterr().err


def test_a_given_answers_sentence_without_a_span_never_wins_on_its_answer_score(scorer):
    """A given answer's û_seq is mapped without the span term, off the scale of its spans' û: with a
    given-answer calibration, a region no span covers has no uncertainty to compare, not û_seq."""
    r = scorer.score("Who was Marie Curie?", response="Marie Curie won the Nobel Prize in 1903. Yes.")
    assert r.answer_source == "given" and r.calibration_source == "generated"  # the test probe has no given mapping
    tail = r.answer.index("Yes.")
    mapped = r.model_copy(update={"calibration_source": "given", "spans": [s for s in r.spans if s.end <= tail]})
    assert region_u(mapped, tail, len(r.answer)) is None
    # the backbone's own answer: û_seq is on its spans' scale and stands for a region without a claim
    assert region_u(mapped.model_copy(update={"answer_source": "generated"}), tail, len(r.answer)) == r.u_seq


def test_a_candidate_that_drops_a_trusted_fact_of_its_region_is_not_scored(scorer, monkeypatch):
    answer = "Canberra, which Walter Griffin planned with Marion Griffin in 1913, is the capital of Australia."
    spans = sorted(scorer.score(PROMPT, answer).spans, key=lambda s: s.start)
    # a threshold under which an early span is doubtful and a later one in the same sentence is trusted
    i, j = next((i, j) for i in range(len(spans)) for j in range(i + 1, len(spans)) if spans[j].u < spans[i].u)
    threshold = (spans[i].u + spans[j].u) / 2
    _refine_settings(scorer, monkeypatch, refine_margin=0.0)
    _says(scorer, monkeypatch, ["Sydney is the capital of Australia."] * 3)  # repeated, but it drops the trusted span
    assert spans[j].text not in "Sydney is the capital of Australia."
    r = scorer.refine(PROMPT, answer, mode="regenerate", threshold=threshold)
    assert r.candidates_scored == 0 and r.answer == answer
    assert next(s for s in r.spans if (s.start, s.end) == (spans[j].start, spans[j].end)).action == "kept"
