"""The baselines' formulas on tiny inputs with known answers, and against the reference implementations
(lm-polygraph 0.7.0, selfcheckgpt 0.1.7) where those run here."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from spanuq.baselines.detectors import (bio_labels, contiguous_runs, decode_bio, entropy_spans, scores_for_labelled,
                                        sliding_windows)
from spanuq.baselines.sampling import (discrete_entropy, eigen_score, kle, selfcheck_nli, semantic_clusters,
                                       sentences_with_offsets)


# ---------------------------------------------------------------- single pass

def test_entropy_of_a_one_hot_distribution_is_zero_and_of_a_uniform_one_is_log_v():
    from spanuq.llm.states import token_entropy

    logits = torch.full((2, 50), -1e4)
    logits[0, 7] = 0.0  # one-hot
    logits[1] = 0.0  # uniform
    h = token_entropy(logits)
    assert h[0].item() == pytest.approx(0.0, abs=1e-6)
    assert h[1].item() == pytest.approx(math.log(50), rel=1e-5)


def test_verbalized_confidence_parsing_counts_what_it_cannot_read():
    from spanuq.baselines.backbone import parse_confidence

    assert parse_confidence("85") == 0.85
    assert parse_confidence("I'd say 100%.") == 1.0
    assert parse_confidence("Confidence: 250 or 40") == 0.40  # 250 is no percentage
    assert parse_confidence("very sure") is None


# ---------------------------------------------------------------- sampling formulas

def test_semantic_entropy_is_zero_for_equivalent_answers_and_log_s_for_contradicting_ones():
    S = 5
    same = np.ones((S, S))
    assert discrete_entropy(semantic_clusters(same)) == 0.0
    contradicting = np.eye(S)
    assert semantic_clusters(contradicting) == list(range(S))
    assert discrete_entropy(semantic_clusters(contradicting)) == pytest.approx(math.log(S))
    two_camps = np.kron(np.eye(2), np.ones((2, 2)))  # {0, 1} and {2, 3}
    assert semantic_clusters(two_camps) == [0, 0, 1, 1]
    assert discrete_entropy([0, 0, 1, 1]) == pytest.approx(math.log(2))


def test_one_way_entailment_does_not_merge_clusters():
    E = np.array([[1.0, 0.9], [0.1, 1.0]])  # 0 ⊨ 1 but not 1 ⊨ 0
    assert semantic_clusters(E) == [0, 1]


def test_eigenscore_of_identical_embeddings_matches_the_closed_form():
    K, alpha = 4, 1e-3
    z = np.array([0.3, -1.0, 2.0, 0.5])
    c = float(((z - z.mean()) ** 2).sum())  # zᵀ J_d z
    expected = (math.log(K * c + alpha) + (K - 1) * math.log(alpha)) / K  # Σ = c·11ᵀ: eigenvalues Kc, 0, 0, 0
    assert eigen_score(np.tile(z, (K, 1)), alpha) == pytest.approx(expected, rel=1e-9)
    spread = np.random.default_rng(0).normal(size=(K, 16))
    assert eigen_score(spread, alpha) > eigen_score(np.tile(spread[0], (K, 1)), alpha)


def test_kle_is_one_for_mutually_contradicting_answers_and_small_for_equivalent_ones():
    S = 5
    C = 1.0 - np.eye(S)
    assert kle(np.eye(S), C) == pytest.approx(1.0)
    assert kle(np.ones((S, S)), np.zeros((S, S)), t=0.3) < 0.5 < kle(np.eye(S), C)  # e^{-tS·2} mixing left at t = 0.3
    assert kle(np.ones((S, S)), np.zeros((S, S)), t=5.0) == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------- the reference implementations

@pytest.fixture(scope="module")
def polygraph():
    est = pytest.importorskip("lm_polygraph.estimators", reason="pip install 'spanuq[dev]'")
    return est


def test_eigenscore_kle_and_semantic_entropy_equal_lm_polygraph_on_random_inputs(polygraph):
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(6, 32))
    ref = polygraph.EigenScore(alpha=1e-3)({"sample_embeddings": [Z]})[0]
    assert eigen_score(Z, 1e-3) == pytest.approx(ref, rel=1e-8)

    cls = rng.integers(0, 3, size=(6, 6))
    np.fill_diagonal(cls, 0)
    E, C = (cls == 0).astype(float), (cls == 2).astype(float)
    ref = polygraph.KernelLanguageEntropy(t=0.3)({"semantic_matrix_entail": [E], "semantic_matrix_contra": [C]})[0]
    assert kle(E, C, 0.3) == pytest.approx(ref, rel=1e-6)

    ids = [0, 0, 1, 2, 1, 0]
    groups = [[j for j, c in enumerate(ids) if c == k] for k in range(3)]
    se = polygraph.SemanticEntropy(class_probability_estimation="frequency")
    ref = se({"sample_texts": [[f"t{j}" for j in range(6)]],
              "semantic_classes_entail": {"class_to_sample": [groups], "sample_to_class": [ids]}})[0]
    assert discrete_entropy(ids) == pytest.approx(ref, rel=1e-12)


@pytest.fixture(scope="module")
def tiny_two_class_nli(tmp_path_factory):
    """A random DeBERTa-v2 entailment/contradiction classifier with a tiny SentencePiece vocabulary:
    the model family and label layout selfcheckgpt's SelfCheckNLI expects."""
    import sentencepiece as spm
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2Tokenizer

    d = tmp_path_factory.mktemp("tiny-deberta")
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(["Paris is the capital of France.", "Lyon is a city in France.",
                                 "The Eiffel Tower was built in 1889.", "Berlin is the capital of Germany.",
                                 "Mozart composed many symphonies.", "Vivaldi wrote The Four Seasons."] * 20))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(d / "spm"), vocab_size=50,
                                   character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    tok = DebertaV2Tokenizer(vocab_file=str(d / "spm.model"))
    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, num_labels=2, id2label={0: "entailment", 1: "contradiction"},
                          label2id={"entailment": 0, "contradiction": 1}, max_position_embeddings=128)
    DebertaV2ForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return str(d)


def test_selfcheck_nli_equals_selfcheckgpts_loop_with_the_same_nli_model(tiny_two_class_nli):
    """selfcheckgpt 0.1.7's `SelfCheckNLI.predict` calls `batch_encode_plus`, gone in transformers 5, so its
    loop is reproduced here verbatim on one pair at a time: mean over samples of softmax(logits(sentence, sample))[1]."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from spanuq.baselines.nli import HFNLI

    sentences = ["Paris is the capital of France.", "The Eiffel Tower was built in 1889."]
    samples = ["Lyon is a city in France.", "Berlin is the capital of Germany.", "Mozart composed symphonies."]
    tok = AutoTokenizer.from_pretrained(tiny_two_class_nli)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_two_class_nli).eval()
    ref = np.zeros((len(sentences), len(samples)))
    with torch.no_grad():
        for i, sentence in enumerate(sentences):
            for j, sample in enumerate(samples):
                inputs = tok(sentence, sample, padding="longest", truncation=True, return_tensors="pt")
                ref[i, j] = torch.softmax(model(**inputs).logits, dim=-1)[0][1].item()
    ours = selfcheck_nli(sentences, samples, HFNLI(tiny_two_class_nli, "cpu", batch_size=4, model=model, tokenizer=tok))
    np.testing.assert_allclose(ours, ref.mean(-1), rtol=1e-4, atol=1e-6)
    assert ours.std() > 0  # a random model still separates the pairs: the check can fail


# ---------------------------------------------------------------- the offline NLI stand-in

@pytest.fixture(scope="module")
def stand_in():
    from spanuq.baselines.nli import EmbeddingNLI
    from spanuq.config import BaselinesConfig

    return EmbeddingNLI.from_config(BaselinesConfig(device="cpu"))


def test_selfcheck_on_identical_samples_gives_zero_inconsistency(stand_in):
    answer = "Alexander Fleming discovered penicillin in 1928. He was a Scottish physician."
    sents = [s for *_, s in sentences_with_offsets(answer)]
    assert len(sents) == 2
    scores = selfcheck_nli(sents, [answer] * 5, stand_in)
    np.testing.assert_allclose(scores, 0.0, atol=1e-3)
    wrong = selfcheck_nli(sents[:1], ["Louis Pasteur discovered penicillin in 1871."] * 5, stand_in)
    assert wrong[0] > 0.99  # the year and the name disagree: contradiction


def test_semantic_entropy_with_the_stand_in_on_real_answers(stand_in):
    from spanuq.baselines.nli import ENTAIL
    from spanuq.baselines.sampling import nli_matrix

    same = ["The Treaty of Versailles was signed in 1919."] * 4
    assert discrete_entropy(semantic_clusters(nli_matrix(same, stand_in)[..., ENTAIL])) == 0.0
    years = [f"The Treaty of Versailles was signed in {y}." for y in (1917, 1918, 1919, 1920)]
    assert discrete_entropy(semantic_clusters(nli_matrix(years, stand_in)[..., ENTAIL])) == pytest.approx(math.log(4))


def test_a_second_method_reuses_the_embeddings_and_still_pays_their_measured_time(stand_in):
    from spanuq.baselines.nli import ENTAIL
    from spanuq.baselines.sampling import nli_matrix

    samples = ["Marie Curie won the Nobel Prize in 1903.", "Marie Curie won the Nobel Prize in 1911.",
               "She was born in Warsaw."]
    stand_in.start_method()
    first = nli_matrix(samples, stand_in)
    before = stand_in.reused_seconds
    stand_in.start_method()  # semantic entropy, then KLE: the same pairs
    again = nli_matrix(samples, stand_in)
    np.testing.assert_array_equal(first, again)
    paid = stand_in.reused_seconds - before
    assert paid > 0  # the embeddings and key terms the first method computed are billed to the second too
    nli_matrix(samples, stand_in)  # within one method a text is paid once
    assert stand_in.reused_seconds - before == pytest.approx(paid)
    assert first[0, 1, ENTAIL] < 0.5  # the years disagree


# ---------------------------------------------------------------- span detectors

@pytest.mark.parametrize("T,w", [(37, 10), (40, 20), (5, 40), (41, 40), (1, 10)])
def test_sliding_windows_cover_the_answer_with_the_stated_stride(T, w):
    spans = sliding_windows(T, w)
    covered = np.zeros(T, dtype=bool)
    for b, e in spans:
        assert 0 <= b <= e < T and e - b + 1 <= w
        covered[b: e + 1] = True
    assert covered.all()
    assert (np.diff(spans[:, 0]) == -(-w // 2)).all()
    assert spans[-1, 1] == T - 1


def test_entropy_threshold_keeps_contiguous_runs_above_seven_tenths_of_the_maximum():
    h = [0.1, 2.0, 1.5, 0.2, 1.4, 0.0, 1.9, 1.9]
    np.testing.assert_array_equal(entropy_spans(h, 0.7), [[1, 2], [4, 4], [6, 7]])
    np.testing.assert_array_equal(contiguous_runs([True, True, False]), [[0, 1]])
    assert entropy_spans([0.0, 0.0]).shape == (0, 2)


def test_bio_tags_round_trip_to_the_spans():
    spans = np.array([[0, 2], [3, 3], [6, 9]])
    tags = bio_labels(12, spans)
    assert tags.tolist() == [1, 2, 2, 1, 0, 0, 1, 2, 2, 2, 0, 0]
    np.testing.assert_array_equal(decode_bio(tags), spans)
    np.testing.assert_array_equal(decode_bio([0, 2, 2, 0, 1]), [[1, 2], [4, 4]])  # I after O opens a span


def test_every_labelled_span_gets_a_downstream_score():
    from types import SimpleNamespace

    ex = SimpleNamespace(spans=torch.tensor([[0, 3], [10, 12], [20, 21]]))
    detected = [np.array([[0, 4], [11, 11]])]
    s = scores_for_labelled([ex], detected, [np.array([0.9, 0.2])], iou_threshold=0.3, prior=0.4)[0]
    # [0,3] matched by [0,4] (IoU .8); [10,12] overlaps [11,11] below the IoU threshold; [20,21] nothing → prior
    np.testing.assert_allclose(s, [0.9, 0.2, 0.4])


# ---------------------------------------------------------------- the backbone asked about each claim

@pytest.fixture(scope="module")
def claims_context():
    from types import SimpleNamespace

    from spanuq.baselines.context import AnswerContext, AnswerInfo, SpanInfo

    answer = "Canberra is the capital of Australia. It was founded in 1913."
    info = AnswerInfo("q1", "What is the capital of Australia?", "", answer, [], [], [
        SpanInfo(0, 8, "Canberra", "Canberra is the capital of Australia."),
        SpanInfo(56, 60, "1913", "Canberra was founded in 1913.")])
    ex = SimpleNamespace(prompt_id="q1", spans=torch.tensor([[0, 1], [12, 13]]))
    return AnswerContext({"q1": info}), [ex]


@pytest.fixture(scope="module")
def asker(make_cfg_module):
    from spanuq.baselines.backbone import BackboneAsker
    from spanuq.llm.loading import load_backbone

    cfg = make_cfg_module()
    model, tok = load_backbone(cfg)
    return BackboneAsker(model, tok, batch_size=4, system_prompt=cfg.backbone.system_prompt)


@pytest.fixture(scope="module")
def make_cfg_module(tmp_path_factory):
    from spanuq.config import load_config

    from conftest import REPO

    d = tmp_path_factory.mktemp("cfg")
    return lambda *o: load_config(REPO / "params.yaml", [f"paths.data={d / 'data'}", "backbone.device=cpu", *o])


def test_p_true_verbalized_and_self_verification_score_every_claim_and_count_their_cost(claims_context, asker):
    from spanuq.baselines.backbone import PTrue, SelfVerify, Verbalized

    context, examples = claims_context
    p = PTrue(context, asker).score(examples)[0]
    assert p.shape == (2,) and ((p > 0) & (p < 1)).all()
    assert asker.cost.forward_passes == 2 and asker.cost.generated_tokens == 0

    v = Verbalized(context, asker, max_new_tokens=4)
    s = v.score(examples)[0]
    assert s.shape == (2,) and ((s >= 0) & (s <= 1)).all()
    assert v.notes["claims_asked"] == 2 and 0 <= v.notes["parse_failures"] <= 2
    assert all(x == 0.5 for x, a in zip(s, v.notes["example_answers"]) if not any(c.isdigit() for c in a))

    sv = SelfVerify(context, asker).score(examples)[0]
    assert sv.shape == (2,) and sv[0] == sv[1] and sv[0] in (0.0, 0.5, 1.0)  # fraction judged False, broadcast
