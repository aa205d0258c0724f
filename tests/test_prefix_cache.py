"""Sources read once: an answer scored against sources an earlier answer was read against reads only what is
new (the backbone's KV cache of the sources is kept, `spanuq.llm.prefix`), and is scored exactly as in one
teacher-forced pass: the same spans, û to 1e-4."""
import pytest
import torch

from spanuq.llm.prefix import PrefixCache
from spanuq.llm.states import extract_batch

QUESTION = "When was the Eiffel Tower completed, and how tall is it?"
OTHER_QUESTION = "Who designed the Eiffel Tower?"
EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It was designed by "
          "the company of Gustave Eiffel and completed in 1889 as the entrance to the World's Fair. It is 330 metres "
          "tall. Locally nicknamed La dame de fer, it was criticised by some of France's leading artists and "
          "intellectuals for its design, but it has become a global cultural icon of France.")
ANSWERS = [(QUESTION, "The Eiffel Tower was completed in 1925 and is 330 metres tall."),
           (QUESTION, "It was completed in 1889 and it is 330 metres tall."),
           (OTHER_QUESTION, "It was designed by the company of Gustave Eiffel in 1925.")]


def test_an_answer_read_on_the_cache_of_its_prompt_has_the_states_of_one_pass(scorer):
    chats = [scorer.tok.apply_chat_template([{"role": "system", "content": "Sources:\n[1] " + EIFFEL},
                                             {"role": "user", "content": q}], tokenize=False,
                                            add_generation_prompt=True) for q, _ in ANSWERS]
    prompts = [scorer.tok(c, add_special_tokens=False)["input_ids"] for c in chats]
    answers = [scorer.tok(a, add_special_tokens=False)["input_ids"] for _, a in ANSWERS]
    cache = PrefixCache(scorer.model, scorer.layers, scorer.out_dtype, entries=1)
    fed = []
    with scorer.lock:
        for k, (prompt, ids) in enumerate(zip(prompts, answers)):
            got = cache.read(prompt, ids)
            one = extract_batch(scorer.model, scorer.tok, [chats[k]], [ids], scorer.layers, scorer.out_dtype)[0]
            assert got.token_ids.tolist() == ids
            torch.testing.assert_close(got.h.float(), one.h.float(), atol=2e-3, rtol=1e-3)
            torch.testing.assert_close(got.entropy, one.entropy, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got.surprisal, one.surprisal, atol=1e-4, rtol=1e-4)
            fed.append(cache.fed - sum(fed))
    # the first reads all; the same prompt again, only its answer (plus one re-fed token: the logits before the
    # first new one); another question about the same sources, only the question and the answer
    assert fed[0] == len(prompts[0]) + len(answers[0])
    assert fed[1] <= len(answers[1]) + 1
    assert fed[2] == len(prompts[2]) - common(prompts[1], prompts[2]) + len(answers[2])
    assert common(prompts[1], prompts[2]) > len(prompts[2]) // 2  # the sources come first: most is shared


def common(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_scoring_against_the_same_sources_again_gives_the_scores_of_one_pass(scorer, monkeypatch):
    monkeypatch.setattr(scorer.cfg.score, "prefix_cache", 0)
    one_pass = [scorer.score(q, response=a, context=[EIFFEL]) for q, a in ANSWERS]
    monkeypatch.setattr(scorer.cfg.score, "prefix_cache", 1)
    cached, fed = [], []
    for q, a in ANSWERS:
        cached.append(scorer.score(q, response=a, context=[EIFFEL]))
        fed.append(scorer.reading.prefix.fed - sum(fed))
    source_tokens = len(scorer.tok(EIFFEL, add_special_tokens=False)["input_ids"])
    assert fed[0] > source_tokens and max(fed[1:]) < source_tokens // 2  # the later answers: not the sources again
    for a, b in zip(one_pass, cached):
        assert [(s.start, s.end) for s in a.spans] == [(s.start, s.end) for s in b.spans] and a.spans
        assert [s.u for s in b.spans] == pytest.approx([s.u for s in a.spans], abs=1e-4)
        assert b.u_seq == pytest.approx(a.u_seq, abs=1e-4)


def test_an_answer_that_shares_its_start_with_the_last_one_is_read_on_in_one_pass(scorer):
    """Twins that differ in one fact: the second keeps the first's tokens before the fact and reads the rest in one
    forward pass (the last token kept re-fed with them, for the logits the first new one comes from)."""
    from spanuq.llm.capture import StateCapture

    chat = scorer.tok.apply_chat_template([{"role": "system", "content": "Sources:\n[1] " + EIFFEL},
                                           {"role": "user", "content": QUESTION}], tokenize=False,
                                          add_generation_prompt=True)
    prompt = scorer.tok(chat, add_special_tokens=False)["input_ids"]
    right, wrong = (scorer.tok(a, add_special_tokens=False)["input_ids"] for a in (
        "The Eiffel Tower was completed in 1889 and is 330 metres tall.",
        "The Eiffel Tower was completed in 1925 and is 330 metres tall."))
    with scorer.lock:
        cap = StateCapture(scorer.model, prompt, scorer.layers, scorer.out_dtype)
        cap.sync(right)
        before = cap.forwards
        fed = cap.sync(wrong)
        got = cap.item()
        one = extract_batch(scorer.model, scorer.tok, [chat], [wrong], scorer.layers, scorer.out_dtype)[0]
    assert cap.forwards - before == 1 and fed == len(wrong) - common(right, wrong)
    torch.testing.assert_close(got.h.float(), one.h.float(), atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(got.surprisal, one.surprisal, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.entropy, one.entropy, atol=1e-4, rtol=1e-4)
