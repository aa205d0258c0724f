"""Retrieval (bm25s) and cross-sample alignment (NLI, sentence embeddings)."""
import json

import numpy as np
import pytest

from spanuq.label.align import EmbeddingAligner, KeyTermAligner, NLIAligner, entailment_index, make_aligner
from spanuq.context.retrieval import MANIFEST, BM25Retriever

PASSAGES = [
    {"id": "w1", "title": "Canberra", "text": "Canberra is the capital city of Australia, founded in 1913."},
    {"id": "w2", "title": "Sydney", "text": "Sydney is the most populous city in Australia."},
    {"id": "w3", "title": "Penicillin", "text": "Alexander Fleming discovered penicillin in 1928 in London."},
    {"id": "w4", "title": "Mongolia", "text": "Ulaanbaatar is the capital and largest city of Mongolia."},
]


def _corpus(path, passages=PASSAGES):
    path.write_text("".join(json.dumps(p) + "\n" for p in passages))
    return path


def test_bm25_finds_the_passage_that_backs_a_claim_and_saves_its_index_once(tmp_path):
    corpus, index = _corpus(tmp_path / "corpus.jsonl"), tmp_path / "bm25_index"
    r = BM25Retriever.open(corpus, index)
    hits = r.search_many(["Fleming discovered penicillin", "the capital of Mongolia", "zzz qqq"], k=2)
    assert hits[0][0][0].id == "w3" and hits[1][0][0].id == "w4"
    assert hits[2] == []  # nothing scores above zero
    manifest = json.loads((index / MANIFEST).read_text())
    assert manifest["n_passages"] == 4 and len(manifest["corpus_sha256"]) == 64
    mtime = (index / MANIFEST).stat().st_mtime_ns
    assert BM25Retriever.open(corpus, index).search("capital of Australia", 1)[0][0].id == "w1"
    assert (index / MANIFEST).stat().st_mtime_ns == mtime  # loaded, not rebuilt
    _corpus(corpus, PASSAGES[:2])  # the corpus changed: the index is rebuilt
    assert len(BM25Retriever.open(corpus, index).passages) == 2


def test_a_corpus_line_without_text_is_a_clear_error(tmp_path):
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "body": "no text"}\n')
    with pytest.raises(ValueError, match=r"c.jsonl:2: a passage is a JSON object with 'id' and 'text'"):
        BM25Retriever.open(bad, tmp_path / "idx")


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory):
    """A randomly initialised BERT NLI classifier + WordPiece tokenizer, built offline from a config."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tmp_path_factory.mktemp("tiny-nli")
    words = sorted({w.lower().strip(".,") for p in PASSAGES for w in p["text"].split()})
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(d / "vocab.txt"))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, num_labels=3,
                     id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                     label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    BertForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


def test_nli_aligner_loads_a_model_by_id_and_scores_entailment_probabilities(tiny_nli, make_cfg):
    cfg = make_cfg("label.alignment=nli", f"label.nli_model={tiny_nli}", "label.nli_threshold=0.4", "label.device=cpu")
    aligner = make_aligner(cfg.label)
    assert isinstance(aligner, NLIAligner) and aligner.entail == 2 and aligner.threshold == 0.4
    claims = ["Canberra is the capital of Australia.", "Fleming discovered penicillin."]
    cands = [p["text"] for p in PASSAGES]
    s = aligner.scores(claims, cands)
    assert s.shape == (2, 4) and ((s >= 0) & (s <= 1)).all()
    # batching does not change a score, and each entry is P(candidate ⊨ claim) for that pair
    np.testing.assert_allclose(s[1, 2], aligner.entailment([cands[2]], [claims[1]])[0], rtol=1e-5)
    assert aligner.scores([], cands).shape == (0, 4)


def test_the_entailment_class_is_found_whatever_the_label_names():
    assert entailment_index({"entailment": 0, "neutral": 1, "contradiction": 2}) == 0
    assert entailment_index({"LABEL_0": 0, "Entails": 1}) == 1
    with pytest.raises(ValueError, match="entailment class"):
        entailment_index({"LABEL_0": 0, "LABEL_1": 1})


def test_embedding_aligner_puts_paraphrases_above_unrelated_sentences(make_cfg):
    aligner = make_aligner(make_cfg().label)
    assert isinstance(aligner, KeyTermAligner) and isinstance(aligner.base, EmbeddingAligner)
    s = aligner.scores(["Canberra is the capital of Australia."],
                       ["Australia's capital city is Canberra.", "Penicillin was found by Fleming."])
    assert s[0, 0] > aligner.threshold > s[0, 1]


def test_embedding_similarity_never_matches_a_contradiction(make_cfg):
    """Cosine alone puts "capital is Sydney" next to "capital is Canberra" (0.88) and 1879 next to
    1880 (0.94); the key terms of the claim must occur in the candidate first."""
    aligner = make_aligner(make_cfg().label)
    claims = ["The capital of Australia is Sydney.", "Einstein was born in 1879."]
    candidates = ["The capital of Australia is Canberra.", "Einstein was born in 1880."]
    raw = aligner.base.scores(claims, candidates)
    assert raw[0, 0] > aligner.threshold and raw[1, 1] > aligner.threshold  # what embeddings alone say
    s = aligner.scores(claims, candidates)
    assert s[0, 0] == 0.0 and s[1, 1] == 0.0
    # a term the prompt already names is context, not content: it need not be repeated
    s = aligner.scores(["Albert Einstein was born in Ulm."], ["He was born in Ulm."],
                       context="Tell me about Albert Einstein.")
    assert s[0, 0] > aligner.threshold


class CountingEncoder:
    """The sentence-embedding model, recording every text it is asked to encode."""

    def __init__(self, model):
        self.model, self.texts = model, []

    def encode(self, texts, **kw):
        self.texts += texts
        return self.model.encode(texts, **kw)


def test_embedding_aligner_encodes_each_text_once_and_scores_the_same(make_cfg):
    """A prompt's samples are read by every answer labelled against them: their embeddings are kept."""
    shared = make_aligner(make_cfg().label).base
    model = CountingEncoder(shared.model)
    aligner = EmbeddingAligner(model, shared.threshold)
    claims = ["Canberra is the capital of Australia."]
    samples = ["Australia's capital city is Canberra.", "Penicillin was found by Fleming."]
    first = aligner.scores(claims, samples)
    np.testing.assert_allclose(first, shared.scores(claims, samples), atol=1e-6)
    model.texts.clear()
    again = aligner.scores(["Sydney is in Australia.", *claims], samples)
    assert model.texts == ["Sydney is in Australia."]
    np.testing.assert_allclose(again[1:], first, atol=1e-6)
    small = EmbeddingAligner(model, shared.threshold, cache_size=1)
    np.testing.assert_allclose(small.scores(claims, samples), first, atol=1e-6)
    assert len(small.recent) == 1  # the texts read longest ago leave first
