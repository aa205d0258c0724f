"""One answer, three consumers, the same spans: the score API (`SpanUQ.score`), the MLflow model
(a registered pyfunc, given the answer's states, text and token offsets) and the evaluate stage
(`evaluate_probe` on the answer as the extract stage stores it) show the same characters with
the same û, because all three end in `spanuq.model.postprocess`."""
import mlflow
import pytest
import torch

from spanuq import SpanUQ
from spanuq.evaluate.stage import evaluate_probe
from spanuq.features.dataset import ResponseExample, answers
from spanuq.llm.loading import chat_prompt, token_offsets
from spanuq.llm.states import extract_batch
from spanuq.model.calibration import Calibration
from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
from spanuq.pipeline import tracking
from spanuq.score.registry import log_probe

PROMPT = "Who was Marie Curie?"
ANSWER = ("Marie Curie was a Polish–French physicist and chemist. She won the Nobel Prize in Physics in 1903 "
          "and in Chemistry in 1911, and founded the Curie Institute in Warsaw.")
LONG = "\n\n".join([ANSWER] * 8)  # ~320 tokens: longer than the probe's 128, read in windows by all three


@pytest.fixture
def calibrated_probe(scorer, tmp_path):
    """The session's probe with a calibration that changes every score (T = 1.7) and shows many spans."""
    ckpt = load_checkpoint(scorer.checkpoint)
    return save_checkpoint(ckpt.probe, ckpt.probe.cfg, ckpt.d_model, tmp_path / "probe",
                           Calibration(temperature=1.7, validity_threshold=0.2, dup_iou=0.5), extra=ckpt.extra)


@pytest.mark.parametrize("answer", [ANSWER, LONG], ids=["short", "long"])
def test_the_mlflow_model_the_score_api_and_the_evaluate_stage_show_the_same_spans(scorer, calibrated_probe, make_cfg,
                                                                                   answer):
    cfg = make_cfg("evaluate.bootstrap=0")
    ckpt = load_checkpoint(calibrated_probe)
    tok = scorer.tok

    # the score API
    uq = SpanUQ(ckpt, scorer.cfg, scorer.model, tok, calibrated_probe)
    api = [(s.start, s.end, s.u) for s in uq.score(PROMPT, response=answer).spans]

    # the evaluate stage, on the answer's features as the extract stage stores them
    ids, offsets = token_offsets(tok, answer)
    chat = chat_prompt(tok, PROMPT, scorer.system_prompt)
    item = extract_batch(scorer.model, tok, [chat], [ids], scorer.layers, getattr(torch, cfg.extract.dtype))[0]
    example = ResponseExample("p0", "custom", "test", item.h.float(), item.entropy, ids,
                              torch.tensor([[0, 3]]), torch.tensor([0.5]), 0.5, answer)
    _, preds, _ = evaluate_probe(cfg, ckpt.probe, ckpt.calibration, [example], "cpu", answers(tok, [example]),
                                 window=uq.window)
    stage = [(s.start, s.end, s.u) for s in preds[0].shown()]

    # the MLflow model, registered as the train stage registers it
    with tracking.start_run(cfg, "same-spans"):
        log_probe(calibrated_probe, cfg, dev_auroc=0.5)
    pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
    out = pyfunc.predict({"h": item.h.float().numpy(), "entropy": item.entropy.numpy(), "text": answer,
                          "offsets": offsets})[0]
    served = [(s["char_start"], s["char_end"], s["u"]) for s in out["spans"]]

    assert len(api) >= 3, "threshold 0.2 shows several spans of a random probe"
    if answer is LONG:
        assert uq.score(PROMPT, response=answer).windows >= 3 and api[-1][0] > len(answer) * 3 // 4
    assert [s[:2] for s in api] == [s[:2] for s in stage] == [s[:2] for s in served]
    assert [s[2] for s in api] == pytest.approx([s[2] for s in stage], abs=1e-6)
    assert [s[2] for s in api] == pytest.approx([s[2] for s in served], abs=1e-6)
    assert all(answer[a:b] == answer[a:b].strip() and answer[a:b] for a, b, _ in api)  # whole words, no edge spaces


def test_a_given_answers_facts_are_the_same_spans_from_the_api_and_the_mlflow_model(scorer, make_cfg, tmp_path):
    """A probe whose given calibration shows each name, date and number on its own
    (`spanuq.score.facts`): the pyfunc asked for ``source="given"`` with the answer's surprisal shows
    the spans `SpanUQ.score` shows."""
    ckpt = load_checkpoint(scorer.checkpoint)
    given = {"temperature": 1.0, "bias": 0.0, "flag": 0.5, "surprisal": 0.2, "context": 0.1, "fact_spans": True}
    probe = save_checkpoint(ckpt.probe, ckpt.probe.cfg, ckpt.d_model, tmp_path / "probe",
                            Calibration(validity_threshold=0.2, given=given), extra=ckpt.extra)
    ck = load_checkpoint(probe)
    uq = SpanUQ(ck, scorer.cfg, scorer.model, scorer.tok, probe)
    api = [(s.start, s.end, s.u) for s in uq.score(PROMPT, response=ANSWER).spans]
    assert "1911" in {ANSWER[a:b] for a, b, _ in api}  # a date, on its own

    ids, offsets = token_offsets(scorer.tok, ANSWER)
    chat = chat_prompt(scorer.tok, PROMPT, scorer.system_prompt)
    item = extract_batch(scorer.model, scorer.tok, [chat], [ids], scorer.layers, torch.float16)[0]
    cfg = make_cfg()
    with tracking.start_run(cfg, "same-facts"):
        log_probe(probe, cfg, dev_auroc=0.5)
    pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
    out = pyfunc.predict({"h": item.h.float().numpy(), "entropy": item.entropy.numpy(),
                          "surprisal": item.surprisal.numpy(), "text": ANSWER, "offsets": offsets},
                         params={"source": "given"})[0]
    served = [(s["char_start"], s["char_end"], s["u"]) for s in out["spans"]]
    assert [s[:2] for s in api] == [s[:2] for s in served]
    assert [s[2] for s in api] == pytest.approx([s[2] for s in served], abs=1e-3)
