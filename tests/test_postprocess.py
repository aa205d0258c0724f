"""The one post-processing step: kept spans snapped to whole words, duplicates suppressed, scores calibrated."""
import numpy as np
import pytest

from spanuq.llm.loading import token_offsets
from spanuq.model.calibration import Calibration
from spanuq.model.postprocess import select_spans, snap_token_span, token_span_to_chars


@pytest.fixture(scope="module")
def tok():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_tokenizer

    return load_tokenizer(load_config(None))


def chars(tok, text, b, e):
    _, offsets = token_offsets(tok, text)
    return text[slice(*token_span_to_chars(text, offsets, *snap_token_span(offsets, text, b, e)))]


def test_a_span_that_cuts_a_word_grows_to_the_whole_word(tok):
    text = "The capital of Mongolia is Ulaanbaatar, a city of 1,600,000 people."
    ids, offsets = token_offsets(tok, text)
    pieces = [text[s:e] for s, e in offsets]
    first = next(i for i, p in enumerate(pieces) if p.strip() and "Ulaanbaatar".startswith(p.strip()))
    last = max(i for i, (s, e) in enumerate(offsets) if s < text.index(",") and e > text.index("Ulaan"))
    assert first < last  # the name is several tokens
    for b, e in [(first + 1, last), (first, first), (last, last)]:  # any piece of the name
        assert chars(tok, text, b, e) == "Ulaanbaatar"


def test_edge_tokens_of_only_spaces_or_punctuation_are_trimmed(tok):
    text = "Paris is the capital, and it is large."
    _, offsets = token_offsets(tok, text)
    comma = next(i for i, (s, e) in enumerate(offsets) if text[s:e].strip() == ",")
    capital = comma - 1
    assert chars(tok, text, capital, comma + 1) == "capital"  # ", and": punctuation and a function word
    assert chars(tok, text, comma, comma) == ","  # a lone punctuation token stays what it is


def test_a_shown_span_marks_the_wrong_words_not_the_preposition_before_them(tok):
    text = "She won silver in Beijing, China in 1950s and 1960s."
    _, offsets = token_offsets(tok, text)

    def tokens(piece: str, start: int = 0) -> tuple[int, int]:  # the token span holding text[a:b]
        a = text.index(piece, start)
        b = a + len(piece)
        return (next(i for i, (s, e) in enumerate(offsets) if e > a),
                max(i for i, (s, e) in enumerate(offsets) if s < b))

    assert chars(tok, text, *tokens("in Beijing,")) == "Beijing"
    assert chars(tok, text, *tokens("1950s and")) == "1950s"
    assert chars(tok, text, *tokens("silver in Beijing")) == "silver in Beijing"  # inside a span, words stay
    assert chars(tok, text, *tokens("in", text.index(" in 1"))) == "in"  # nothing else: kept as it is


def test_duplicates_are_suppressed_by_validity_and_the_threshold_applies_first():
    spans = np.array([[0, 4], [1, 4], [10, 12], [11, 13], [20, 21]])
    validity = np.array([0.6, 0.9, 0.8, 0.7, 0.3])
    # [0,4] repeats the better [1,4] (IoU 0.8); [11,13] overlaps [10,12] at IoU 0.5 (not above 0.5): kept
    assert select_spans(spans, validity, threshold=0.5).tolist() == [1, 2, 3]
    assert select_spans(spans, validity, threshold=0.5, dup_iou=0.4).tolist() == [1, 2]
    assert select_spans(spans, validity, threshold=0.2).tolist() == [1, 2, 3, 4]
    assert select_spans(spans, validity, threshold=0.95).tolist() == []


def test_calibration_is_the_identity_at_t_one_and_pulls_towards_half_above():
    u = np.array([0.0, 0.1, 0.5, 0.97])
    assert np.array_equal(Calibration(temperature=1.0).scores(u), u)
    cal = Calibration(temperature=2.0).scores(u)
    assert cal[2] == pytest.approx(0.5) and np.all(np.abs(cal - 0.5) <= np.abs(u - 0.5) + 1e-12)


def test_the_function_word_list_is_spacys_rule():
    """Scoring reads the function words from a word list (no spaCy at scoring time); it is spaCy's
    English stop words that are not number words (`python scripts/make_word_lists.py` rewrites it)."""
    from spacy.lang.en.lex_attrs import like_num
    from spacy.lang.en.stop_words import STOP_WORDS

    from spanuq.model.postprocess import function_words

    assert function_words() == frozenset(w for w in STOP_WORDS if not like_num(w))
