"""The with-sources reader: every sentence of the sources read by a small encoder, each answer word measured
against them, a net that learned from people's marks, spans made of names, numbers and content words."""
import json

import numpy as np
import pytest

from spanuq.reader import model as net_io
from spanuq.reader.encoder import load_encoder
from spanuq.reader.features import FEATURES, answer_words, source_sentences, word_rows
from spanuq.reader.model import NetConfig, ReaderNet, with_neighbours
from spanuq.reader.spans import span_scores, spans_of

SOURCE = ("The Golden Gate Bridge is a suspension bridge in San Francisco. It opened in 1937. "
          "Its main span is 1,280 metres long, and it is painted International Orange.")


def texts(answer, groups, words):
    return [answer[words[g[0]][0]: words[g[-1]][1]] for g in groups]


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


def test_a_word_the_sources_do_not_hold_reads_as_absent_and_unaligned(encoder):
    answer = "The bridge opened in 1925 and is painted International Orange."
    rows = word_rows(encoder, [SOURCE], answer, "When did the Golden Gate Bridge open?")
    at = {answer[s:e]: x for (s, e), x in zip(rows.words, rows.x)}
    col = {f: i for i, f in enumerate(FEATURES)}
    assert at["1925"][col["absent_all"]] == 1 and at["Orange"][col["absent_all"]] == 0
    assert at["1925"][col["align_all"]] < at["Orange"][col["align_all"]]
    assert at["opened"][col["in_question"]] == 0 and at["bridge"][col["in_question"]] == 1
    assert rows.x.shape == (len(answer_words(answer)), len(FEATURES)) and rows.passage == [0] * len(rows.words)


def test_a_name_taken_from_another_source_sentence_does_not_stand_with_its_answer_sentence(encoder):
    source = ("Oxygen was isolated by Carl Scheele in Sweden in 1771. "
              "Nitrogen was isolated by Daniel Rutherford in Scotland a year later.")
    col = {f: i for i, f in enumerate(FEATURES)}
    read = {}
    for place in ("Sweden", "Scotland"):
        answer = f"Oxygen was isolated by Carl Scheele, working in {place}."
        rows = word_rows(encoder, [source], answer, "Who isolated oxygen?")
        read[place] = {answer[s:e]: x for (s, e), x in zip(rows.words, rows.x)}[place]
    # both places are in the sources; of the answer sentence's other content words the sources hold ("oxygen",
    # "isolated", "Carl", "Scheele"; not "working"), Sweden stands beside all four, Scotland beside one
    assert read["Sweden"][col["absent_all"]] == read["Scotland"][col["absent_all"]] == 0
    assert read["Sweden"][col["answer_sentence"]] == 1.0 and read["Scotland"][col["answer_sentence"]] == 0.25
    assert read["Sweden"][col["answer_near"]] > read["Scotland"][col["answer_near"]]
    # a sentence with no other word the sources hold says nothing of where its word stands
    rows = word_rows(encoder, [source], "The answer is Scotland.", "Where was nitrogen isolated?")
    assert rows.x[3, col["answer_sentence"]] == rows.x[3, col["answer_near"]] == 1.0


def test_numbers_match_with_their_separators_and_in_words(encoder):
    rows = word_rows(encoder, ["The main span is one thousand two hundred and eighty (1,280) metres long."],
                     "The span is 1280 metres.")
    assert rows.x[answer_words("The span is 1280 metres.").index((12, 16)), FEATURES.index("absent_all")] == 0


def test_every_sentence_of_every_passage_is_read_and_a_long_one_in_pieces():
    sents, of = source_sentences(["One. Two!\nThree without a stop", "x " * 700])
    assert sents[:3] == ["One.", "Two!", "Three without a stop"] and of[:3] == [0, 0, 0]
    assert len(sents) > 4 and set(of[3:]) == {1} and sum(len(s) for s in sents[3:]) >= 1300


@pytest.mark.parametrize("answer, entities, spans", [
    ("He was born in 1909 in the city of Paris and died there.", [], ["born", "in 1909", "in the city", "of Paris",
                                                                      "and died there"]),
    ("The answer is Fox.", [], ["The answer", "Fox"]),  # "is" links, it leads into nothing
    ("It opened in May 1937, painted International Orange.", [(13, 21), (31, 51)],
     ["opened", "in May 1937", "painted", "International Orange"]),
])
def test_spans_are_names_numbers_and_content_words_with_the_function_words_that_lead_into_them(answer, entities,
                                                                                             spans):
    words = answer_words(answer)
    groups = spans_of(answer, words, entities)
    assert texts(answer, groups, words) == spans
    assert sorted(i for g in groups for i in g) == sorted(set(i for g in groups for i in g))  # no word twice


def test_a_span_reads_as_its_least_backed_word():
    assert span_scores(np.array([0.1, 0.9, 0.2]), [[0, 1], [2]]).tolist() == [0.9, 0.2]


def test_each_word_is_read_with_its_neighbours_in_its_own_sentence():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    z = with_neighbours(x, [0, 0, 1, 1])
    assert z.shape == (4, 10)
    assert z[1, 2:4].tolist() == [0, 1] and z[1, 4:6].tolist() == [2, 3]  # left neighbour; right: itself (edge)
    assert z[2, 8:10].tolist() == [5, 6]  # the mean of its sentence


def test_the_net_is_saved_as_safetensors_and_reads_the_same_after_loading(tmp_path):
    net = ReaderNet(NetConfig(features=list(FEATURES), extra={"calibration": {"given": {"temperature": 2.0}}}))
    net_io.save(net, tmp_path)
    back = net_io.load(tmp_path)
    z = np.random.default_rng(0).normal(size=(5, 5 * len(FEATURES))).astype(np.float32)
    assert np.allclose(back.probability(z), net.probability(z))
    assert json.loads((tmp_path / "config.json").read_text())["extra"]["calibration"]["given"]["temperature"] == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


@pytest.fixture(scope="module")
def backbone(repo_root):
    """The real SmolLM2 backbone, as the scorer holds it."""
    from spanuq.config import load_config
    from spanuq.llm.loading import load_backbone
    from spanuq.reader.backbone import Backbone

    cfg = load_config(repo_root / "params.yaml")
    return Backbone(*load_backbone(cfg), cfg.backbone.system_prompt)


def test_the_backbone_finds_a_word_the_sources_state_likelier_with_them(backbone, encoder, tmp_path):
    from spanuq.pipeline.cache import ItemCache
    from spanuq.reader.backbone import backbone_rows
    from spanuq.reader.features import BACKBONE_FEATURES

    answer = "The bridge is painted International Orange."
    words = answer_words(answer)
    x = backbone_rows(backbone, encoder, [SOURCE], answer, "What colour is the bridge?", words)
    assert x.shape == (len(words), len(BACKBONE_FEATURES))
    given, without, change = x.T
    np.testing.assert_allclose(change, given - without, atol=1e-5)
    orange = [i for i, (s, e) in enumerate(words) if answer[s:e] == "Orange"][0]
    assert given[orange] < without[orange] - 2  # stated in the source: far less surprising after it
    cache = ItemCache(tmp_path)
    first = backbone_rows(backbone, encoder, [SOURCE], answer, "What colour is the bridge?", words, cache=cache)
    assert len(list(tmp_path.rglob("*.json"))) == 1
    np.testing.assert_allclose(first, x, atol=1e-5)
    np.testing.assert_array_equal(backbone_rows(backbone, encoder, [SOURCE], answer, "What colour is the bridge?",
                                                words, cache=cache), first)


def test_the_backbone_reads_the_source_sentences_most_like_the_answer_when_there_are_more(encoder):
    from spanuq.reader.backbone import TOP, read_sources

    others = [f"The Louvre held exhibition number {i} in Paris." for i in range(10)]
    assert read_sources(encoder, [SOURCE], "It is orange.", "What colour?") == [SOURCE]  # three sentences: all
    read = read_sources(encoder, others + [SOURCE], "The bridge is painted International Orange.", "What colour?")
    assert len(read) == 1 and "International Orange" in read[0]
    assert len(source_sentences(read)[0]) == TOP
