"""A status on every result: ``scored``, or ``unverified`` with reasons — each reason reached here by
scoring an answer (``probe_backbone_mismatch`` by an upstream reply also in tests/test_openai_api.py)."""
import copy
import json

import pytest
import torch

from servers import scoring_service
from spanuq.score.status import AnsweredBy, StatusCheck, assess, same_backbone, tokens_agree

ANSWER = ("Canberra is the capital of Australia. It was founded in 1913, and its lake is named after Walter Burley "
          "Griffin, the American architect who designed the city together with Marion Mahony Griffin.")


def codes(result) -> list[str]:
    return [r.code for r in result.status_reasons]


def test_an_ordinary_answer_is_scored(scorer):
    r = scorer.score("What is the capital of Australia?", response=ANSWER)
    assert r.status == "scored" and r.status_reasons == [] and r.warnings == []


def test_an_empty_answer_is_unverified_everywhere(scorer, capsys):
    r = scorer.score("What is the capital of Australia?", response="  ")
    assert r.status == "unverified" and codes(r) == ["empty_answer"]
    assert r.spans == [] and r.u_seq is None and r.n_tokens == 0
    from spanuq.score.views import fragment, terminal_view

    assert "UNVERIFIED" in terminal_view(r, colour_on=False) and "û_seq =" not in terminal_view(r, False)
    assert "unverified" in fragment(r).lower()
    with scoring_service(scorer) as (url, _):
        import httpx

        got = httpx.post(f"{url}/score", json={"prompt": "Who?", "response": ""}, timeout=300)
        assert got.status_code == 200 and got.json()["status"] == "unverified"
        assert got.json()["status_reasons"][0]["code"] == "empty_answer"
        page = httpx.post(f"{url}/render", json=got.json(), timeout=60).json()["html"]
        assert "the answer is empty" in page


def test_another_language_is_unverified_with_its_name(scorer):
    r = scorer.score("Qui était Marie Curie ?", response="Marie Curie était une physicienne et chimiste polonaise, "
                                                         "naturalisée française, deux fois lauréate du prix Nobel.")
    assert r.status == "unverified" and codes(r) == ["language"] and "French" in r.status_reasons[0].message
    assert r.spans and r.u_seq is not None  # scored, but not presented as judged
    assert r.warnings == [r.status_reasons[0].message]


def test_no_hidden_states_when_the_backbone_gives_none(scorer):
    """A backbone whose weights are broken (NaN in one block) gives no readable state: no û, unverified."""
    from spanuq import SpanUQ
    from spanuq.model.checkpoint import load_checkpoint

    broken = copy.deepcopy(scorer.model)
    with torch.no_grad():
        broken.model.layers[3].mlp.down_proj.weight.fill_(float("nan"))
    uq = SpanUQ(load_checkpoint(scorer.checkpoint), scorer.cfg, broken, scorer.tok, scorer.checkpoint,
                threshold=scorer.threshold)
    r = uq.score("What is the capital of Australia?", response=ANSWER)
    assert r.status == "unverified" and codes(r) == ["no_hidden_states"]
    assert r.spans == [] and r.u_seq is None
    assert json.loads(r.model_dump_json())["u_seq"] is None


def test_a_window_that_cannot_be_read_is_reported_and_the_rest_scored(scorer):
    """An answer longer than the probe's window, whose states are unreadable in one stretch (as a
    capture broken mid-way gives): that window's text is named and left unjudged, the others are scored."""
    from spanuq.llm.loading import token_offsets
    from spanuq.llm.states import extract_batch

    long = " ".join([ANSWER] * 6)
    prompt = "Tell me about Canberra."
    chat, _ = scorer._chat(prompt)
    ids, offsets = token_offsets(scorer.tok, long)
    item = extract_batch(scorer.model, scorer.tok, [chat], [ids], scorer.layers, scorer.out_dtype)[0]
    whole = scorer.score(prompt, response=long)
    assert whole.windows >= 3 and whole.status == "scored"
    item.h = item.h.clone()
    item.h[5] = float("nan")  # in the first window only
    r = scorer.score_many([{"prompt": prompt, "response": long}], progress=False, states=[item])[0]
    assert r.status == "unverified" and codes(r) == ["window_failed"]
    where = r.status_reasons[0].message
    assert f"of the answer's {whole.windows} windows" in where
    bad = offsets[5][0]
    assert f"1 of the answer's {whole.windows} windows" in where and "characters 0-" in where
    assert not any(s.start <= bad < s.end for s in r.spans) and r.spans and r.u_seq is not None


def test_a_probe_of_another_backbone_is_unverified(scorer):
    """A probe whose checkpoint says it read another backbone's states, put beside this backbone by
    hand (the Python API; `SpanUQ.load` always loads the checkpoint's own backbone)."""
    from spanuq import SpanUQ
    from spanuq.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(scorer.checkpoint)
    ckpt.extra["backbone"] = "smollm2-1.7b"
    uq = SpanUQ(ckpt, scorer.cfg, scorer.model, scorer.tok, scorer.checkpoint, threshold=scorer.threshold)
    r = uq.score("What is the capital of Australia?", response=ANSWER)
    assert r.status == "unverified" and codes(r) == ["probe_backbone_mismatch"]
    assert "smollm2-1.7b" in r.status_reasons[0].message and r.spans  # scored, not presented as judged


def test_a_given_answer_on_a_subject_the_backbone_does_not_know(scorer):
    """``subject_unknown`` reads the backbone's entropy before a given answer's spans against the
    probe's fitted threshold: at a threshold under that entropy the answer is unverified; the backbone's
    own answers are never judged by it."""
    import dataclasses

    from spanuq import SpanUQ
    from spanuq.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(scorer.checkpoint)
    base = scorer.score("What is the capital of Australia?", response=ANSWER)
    assert base.status == "scored" and base.spans
    for tau, unknown in ((0.0, True), (1e6, False)):
        ckpt = dataclasses.replace(ckpt, calibration=dataclasses.replace(ckpt.calibration,
                                                                         given={"unknown_entropy": tau}))
        uq = SpanUQ(ckpt, scorer.cfg, scorer.model, scorer.tok, scorer.checkpoint, threshold=scorer.threshold)
        r = uq.score("What is the capital of Australia?", response=ANSWER)
        assert codes(r) == (["subject_unknown"] if unknown else []), tau
        if unknown:
            assert "does not know this subject" in r.status_reasons[0].message and r.spans
        assert uq.score("What is the capital of Australia?", response=ANSWER,
                        answer_source="generated").status == "scored"


def test_probe_backbone_mismatch_rules():
    base = dict(answer="Paris is the capital of France.", backbone="smollm2-135m", n_tokens=8)
    assert assess(StatusCheck(**base)) == []
    [r] = assess(StatusCheck(**base, probe_backbone="qwen3-8b"))
    assert r.code == "probe_backbone_mismatch" and "qwen3-8b" in r.message
    for model in ("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct", "/models/SmolLM2-135M-Instruct.Q4_1.gguf"):
        assert same_backbone(model, "smollm2-135m") and not assess(StatusCheck(**base, answered_by=AnsweredBy(model)))
    assert not same_backbone("Qwen/Qwen3-8B", "smollm2-135m") and not same_backbone("smollm2-1.7b", "smollm2-135m")
    # an undeclared upstream may be any model: its answer is a given answer, and who wrote it is no reason
    assert not assess(StatusCheck(**base, answered_by=AnsweredBy("Qwen/Qwen3-8B", completion_tokens=30)))
    [r] = assess(StatusCheck(**base, answered_by=AnsweredBy("Qwen/Qwen3-8B", declared="smollm2")))
    assert "declared to serve smollm2-135m" in r.message
    assert not assess(StatusCheck(**base, answered_by=AnsweredBy("my-model", declared="my-model", completion_tokens=9)))
    [r] = assess(StatusCheck(**base, answered_by=AnsweredBy("my-model", declared="my-model", completion_tokens=30)))
    assert "another tokenizer" in r.message
    assert tokens_agree(9, 8) and not tokens_agree(30, 8)


def test_a_new_rule_is_one_function():
    from spanuq.score import status

    @status.rule
    def shouting(c):
        return status.StatusReason(code="shouting", message="all capitals") if c.answer.isupper() else None

    try:
        assert [r.code for r in assess(StatusCheck(answer="PARIS IS THE CAPITAL.", backbone="x"))] == ["shouting"]
    finally:
        status.RULES.remove(shouting)
