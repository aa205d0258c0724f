"""Sources (``context``): the checks on them, the one way they reach the backbone, windows past the
budget, long sources focused on the question, and the with-sources calibration a checkpoint may carry."""
import json

import pytest

from spanuq.context.focus import focus, pieces, question_of, sentence_spans
from spanuq.context.numbers import runs, with_digits
from spanuq.context.passages import ContextError, Passage, as_passages
from spanuq.context.render import count_tokens, render, render_windows
from spanuq.model.calibration import Calibration

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QUESTION = [{"role": "user", "content": "When was the Eiffel Tower finished?"}]
EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It was designed by "
          "the company of Gustave Eiffel and finished in 1889 for the World's Fair.")


@pytest.fixture(scope="module")
def tok():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_tokenizer

    return load_tokenizer(load_config(None))


def test_sources_are_numbered_in_the_system_message_before_the_question(tok):
    passages = as_passages([EIFFEL, {"id": "wiki-42", "title": "Paris", "text": "Paris is the capital of France."}],
                           10_000, 8)
    r = render(tok, QUESTION, [(i, p, 0, len(p.text)) for i, p in enumerate(passages, 1)], SYSTEM)
    system = r.chat[: r.chat.index("<|im_start|>user")]
    assert SYSTEM in system and "Sources:\n[1] The Eiffel Tower" in system and "[2] Paris: Paris is the capital" in system
    assert r.chat.index("Sources:") < r.chat.index("When was the Eiffel Tower finished?")
    assert [(x.id, x.number, x.start, x.end) for x in r.read] == [("1", 1, 0, len(EIFFEL)), ("wiki-42", 2, 0, 31)]
    for x, p in zip(r.read, passages):  # where each passage's characters are in the chat
        assert r.chat[x.chat_start:x.chat_end] == p.text
    assert r.n_tokens == len(tok(r.chat, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("text, read", [
    ("It was discovered in seventeen sixty-six.", "It was discovered in seventeen sixty-six (1766)."),
    ("Neon occupies position ten.", "Neon occupies position ten (10)."),
    ("a hall of one hundred and twelve rooms", "a hall of one hundred and twelve (112) rooms"),
    ("nineteen oh five and two thousand and five", "nineteen oh five (1905) and two thousand and five (2005)"),
    ("twenty-one and thirty", "twenty-one (21) and thirty (30)"),
    ("No one left; one of them stayed.", "No one left; one of them stayed."),  # a lone "one": a pronoun
    ("finished in 1889", "finished in 1889"),
])
def test_numbers_in_words_are_read_with_their_digits(text, read):
    assert with_digits(text) == read


def test_a_source_that_is_nothing_but_number_words_is_read_at_once():
    text = " ".join(["seventeen sixty-six and"] * 20_000)  # 60,000 number words: runs are read 12 words at most
    read = with_digits(text)
    assert read.startswith("seventeen sixty-six (1766) and seventeen sixty-six (1766)") and len(runs(text)) == 20_000


def test_a_source_s_number_words_reach_the_backbone_with_their_digits_and_keep_its_characters(tok):
    p = Passage("1", "Neon was first reported in eighteen ninety-eight by Ramsay.")
    r = render(tok, QUESTION, [(1, p, 0, len(p.text))], SYSTEM)
    assert "[1] Neon was first reported in eighteen ninety-eight (1898) by Ramsay." in r.chat
    (x,) = r.read
    assert (x.start, x.end) == (0, len(p.text))  # what the result says was read: the source's own characters
    assert r.chat[x.chat_start:x.chat_end] == with_digits(p.text)
    assert [(p.text[a:b], n) for a, b, n in runs(p.text)] == [("eighteen ninety-eight", 1898)]


def test_sources_past_the_budget_are_read_in_windows_that_read_every_character(tok):
    passages = [Passage(str(i), f"Fact {i}: " + EIFFEL) for i in range(6)] + [Passage("long", " ".join([EIFFEL] * 8))]
    windows = render_windows(tok, QUESTION, passages, max_tokens=260, system_prompt=SYSTEM, max_windows=20)
    assert len(windows) > 2 and all(w.n_tokens <= 260 for w in windows)
    for p in passages:  # every character of every passage is read, once, in order
        ranges = [(r.start, r.end) for w in windows for r in w.read if r.id == p.id]
        assert ranges[0][0] == 0 and ranges[-1][1] == len(p.text)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    long_pieces = [w.chat[r.chat_start:r.chat_end] for w in windows for r in w.read if r.id == "long"]
    assert len(long_pieces) > 1 and "".join(long_pieces) == passages[-1].text
    assert render_windows(tok, QUESTION, passages[:1], 260, SYSTEM)[0].read[0].end == len(passages[0].text)


def test_sources_past_every_limit_are_refused_not_cut(tok):
    passages = [Passage("big", " ".join([EIFFEL] * 30))]
    with pytest.raises(ContextError, match="more than 2 windows") as e:
        render_windows(tok, QUESTION, passages, max_tokens=300, system_prompt=SYSTEM, max_windows=2)
    assert e.value.status == 413
    with pytest.raises(ContextError, match="no room is left for sources"):
        render_windows(tok, [{"role": "user", "content": EIFFEL * 3}], passages, 120, SYSTEM)


@pytest.mark.parametrize("context, message", [
    ([], "empty list"),
    ("just a string", "must be a list"),
    ([EIFFEL, 42], "passage 2 must be a string"),
    ([{"text": None}], "passage 1 must be a string"),
    (["  "], "passage 1 is empty"),
    ([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}], "unique; repeated: a"),
    ([{"text": "x", "url": "http://"}], "unknown keys"),
])
def test_bad_context_is_a_clear_error(context, message):
    with pytest.raises(ContextError, match=message):
        as_passages(context, 10_000, 8)


def test_context_over_the_character_or_passage_limit_is_413():
    with pytest.raises(ContextError, match="limit is 100") as e:
        as_passages(["x" * 101], 100, 8)
    assert e.value.status == 413
    with pytest.raises(ContextError, match="3 passages; the limit is 2"):
        as_passages(["a", "b", "c"], 100, 2)


def test_with_sources_calibration_is_taken_when_fitted_and_named():
    grounded = {"generated": {"temperature": 2.0, "flag": 0.4}, "given": {"temperature": 0.5, "bias": 1.0, "flag": 0.6}}
    cal = Calibration(temperature=1.5, given={"temperature": 3.0, "flag": 0.7}, grounded=grounded)
    assert cal.for_source("given", grounded=True).temperature == 0.5
    assert cal.for_source("given", grounded=True).flag == 0.6
    assert cal.for_source("generated", grounded=True).temperature == 2.0
    assert cal.for_source("given").temperature == 3.0 and cal.for_source("generated").temperature == 1.5
    assert cal.fitted_for("given", grounded=True) == "given+context"
    assert cal.fitted_for("given") == "given"
    again = Calibration.from_dict(json.loads(json.dumps(cal.as_dict())))  # config.json round trip
    assert again == cal and again.grounded == grounded
    plain = Calibration(temperature=1.5, given={"temperature": 3.0})
    assert "grounded" not in plain.as_dict()  # what a probe without it stored before
    assert plain.for_source("given", grounded=True).temperature == 3.0  # no with-sources mapping: without
    assert plain.fitted_for("given", grounded=True) == "given"
    with pytest.raises(ValueError, match="unknown answer source"):
        Calibration(grounded={"pasted": {}})


PARIS = Passage("paris", "Paris is the capital of France. It has about two million inhabitants.", "Paris")
CATS = Passage("cats", "Cats sleep a lot. They hunt mice at night. " * 12)
RIVER = Passage("river", "The Seine flows through Paris. It reaches the sea at Le Havre.")


def test_sentences_tile_the_text():
    text = "One. Two! Three? Four"
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["One. ", "Two! ", "Three? ", "Four"]


def test_a_short_passage_is_one_piece_and_a_long_one_is_cut_at_sentence_ends(tok):
    assert pieces(tok, PARIS) == [(0, len(PARIS.text))]
    cut = pieces(tok, CATS, max_tokens=20)
    assert len(cut) > 1 and cut[0][0] == 0 and cut[-1][1] == len(CATS.text)
    assert all(a[1] == b[0] for a, b in zip(cut, cut[1:]))  # they tile the passage
    assert all(CATS.text[s:e].rstrip().endswith(".") for s, e in cut)  # whole sentences
    assert all(count_tokens(tok, CATS.text[s:e]) <= 20 for s, e in cut)


def test_the_pieces_about_the_question_are_kept_in_reading_order(tok):
    passages = [CATS, PARIS, RIVER]
    kept = focus(tok, passages, "What is the capital of France, and which river flows through Paris?", 56)
    assert [(n, p.id) for n, p, _, _ in kept] == [(2, "paris"), (3, "river")]
    assert kept[0][2:] == (0, len(PARIS.text))
    # a budget smaller than the best piece still reads that piece
    assert [p.id for _, p, _, _ in focus(tok, passages, "the capital of France", 1)] == ["paris"]


def test_the_query_is_the_conversation_s_user_turns():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is Paris?"},
                {"role": "assistant", "content": "In France."},
                {"role": "user", "content": [{"type": "text", "text": "And Lyon?"}]}]
    assert question_of(messages) == "Where is Paris?\nAnd Lyon?"


def test_a_long_source_full_of_number_words_is_still_read_in_windows_not_refused(tok):
    years = " ".join(f"Event {i} happened in seventeen sixty-{w}." for i, w in
                     enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"] * 6))
    windows = render_windows(tok, QUESTION, [Passage("years", years)], max_tokens=200, system_prompt=SYSTEM,
                             max_windows=20)
    assert len(windows) > 1 and all(w.n_tokens <= 200 for w in windows)
    assert "seventeen sixty-one (1761)" in windows[0].chat
    assert "".join(years[r.start:r.end] for w in windows for r in w.read) == years
