"""The shipped probe reads answers with sources through its reader: on passages it never trained on, a fact the
passage states reads below the red line, one it contradicts above it, every character is read, and nothing is
listed twice (the trials of issue "real-sources", as a user would make them)."""
import pytest

BRIDGE = ("The Golden Gate Bridge is a suspension bridge spanning the Golden Gate, the one-mile-wide strait connecting "
          "San Francisco Bay and the Pacific Ocean. The structure links San Francisco to Marin County. It opened in "
          "1937 and was, at the time, the longest and the tallest suspension bridge in the world, with a main span of "
          "1,280 metres and a total height of 227 metres. The bridge's chief engineer was Joseph Strauss, who worked "
          "with Leon Moisseiff and Charles Ellis on its design. Its colour, International Orange, was chosen by "
          "consulting architect Irving Morrow because it complements the natural surroundings and enhances the "
          "bridge's visibility in fog.")
QUESTION = "Tell me about the Golden Gate Bridge."


@pytest.fixture(scope="module")
def shipped(repo_root):
    from spanuq import SpanUQ
    from spanuq.config import load_config

    with SpanUQ.load("shipped", cfg=load_config(repo_root / "params.yaml")) as uq:
        assert uq.reader is not None, "the shipped probe carries its with-sources reader"
        yield uq


def span(result, text):
    return next(s for s in result.spans if s.text == text)


def test_a_stated_fact_reads_below_the_red_line_and_a_contradicted_one_above(shipped):
    right = shipped.score(QUESTION, context=[BRIDGE],
                          response="The Golden Gate Bridge opened in 1937. It is painted International Orange.")
    wrong = shipped.score(QUESTION, context=[BRIDGE],
                          response="The Golden Gate Bridge opened in 1937. Its main span is 2,100 metres long.")
    assert right.status == wrong.status == "scored" and right.calibration_source == "given+context"
    assert span(right, "International Orange").u < right.flag_threshold
    assert span(right, "in 1937").u < right.flag_threshold
    assert span(wrong, "2,100 metres").u >= wrong.flag_threshold  # the passage says 1,280
    assert max(wrong.spans, key=lambda s: s.u).text == "2,100 metres"
    assert [(x.start, x.end) for x in right.context_read] == [(0, len(BRIDGE))]  # the whole passage, read


def test_the_right_answer_among_others_is_not_red_and_no_filler_is_flagged(shipped):
    passage = ("House is an American television medical drama that originally ran on the Fox network for eight "
               "seasons, from November 16, 2004 to May 21, 2012. NBC had passed on an earlier pitch.")
    right = shipped.score("Which network did House run on?", response="The answer is Fox.", context=[passage])
    wrong = shipped.score("Which network did House run on?", response="The answer is NBC.", context=[passage])
    assert [s.text for s in right.spans] == ["The answer", "Fox"]
    assert span(right, "Fox").u < span(wrong, "NBC").u
    assert span(right, "Fox").u < right.flag_threshold and span(right, "The answer").u < right.flag_threshold


def test_the_backbones_own_answer_with_sources_is_scored(shipped):
    r = shipped.score("When did the Golden Gate Bridge open?", context=[BRIDGE])
    assert r.answer_source == "generated" and r.status == "scored" and r.calibration_source == "generated+context"
    assert 0 <= r.u_seq <= 1 and len({(s.start, s.end) for s in r.spans}) == len(r.spans)
