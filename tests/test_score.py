"""The score API: `SpanUQ.score(prompt, response=...)`, `score(prompt)`, `score_many`, loading."""
import json

import jsonschema
import pytest
import torch

from spanuq import InputError, ScoreResult
from spanuq.score.schema import json_schema

ANSWERS = [
    "  Marie Curie was a Polish–French physicist and chemist.\nShe won two Nobel Prizes, in 1903 and 1911.",
    "\n\nThe capital of Australia is Canberra.  It was founded in 1913 — not Sydney!",
    "Ça va: Zürich liegt in der Schweiz. 東京は日本の首都です。 Emoji 😀 count as one character.\n",
]


GRAPHEMES = "Paris 🇫🇷 and Berlin 🇩🇪 are capitals; the family 👩‍👩‍👧 of Jose\u0301 lives in Tōkyō 🇯🇵🇯🇵."


def test_character_offsets_never_split_a_user_perceived_character(scorer):
    """Flags (two regional indicators), ZWJ sequences and combining accents span several code
    points, and byte-level BPE can put a token boundary inside them: no span offset may."""
    import regex

    from spanuq.llm.loading import token_offsets
    from spanuq.model.postprocess import token_span_to_chars

    clusters = {m.start() for m in regex.finditer(r"\X", GRAPHEMES)} | {len(GRAPHEMES)}
    ids, offsets = token_offsets(scorer.tok, GRAPHEMES)
    inside = {o for s, e in offsets for o in (s, e)} - clusters
    assert inside, "the tokenizer must split some cluster, or this test checks nothing"
    for b in range(len(ids)):  # every token span the probe could predict
        for e in range(b, min(len(ids), b + 6)):
            start, end = token_span_to_chars(GRAPHEMES, offsets, b, e)
            assert start in clusters and end in clusters, (b, e, GRAPHEMES[start:end])
    r = scorer.score("Which cities are capitals?", response=GRAPHEMES)
    assert r.spans and all(s.start in clusters and s.end in clusters for s in r.spans)


@pytest.mark.parametrize("answer", ANSWERS)
def test_offsets_slice_the_original_string_back_to_each_span(scorer, answer):
    r = scorer.score("Tell me something true.", response=answer)
    assert r.answer == answer and r.answer_source == "given" and r.generator is None
    assert r.spans, "threshold 0 keeps every query: some span must survive duplicate suppression"
    enc = scorer.tok(answer, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    assert r.n_tokens == len(ids)
    for s in r.spans:
        assert answer[s.start:s.end] == s.text and s.text == s.text.strip() and s.text
        assert 0 <= s.b <= s.e < r.n_tokens and 0 <= s.u <= 1 and s.nu > 0
        covered = (offsets[s.b][0], offsets[s.e][1])  # the characters of tokens b..e, before snapping to words
        assert s.start < covered[1] and s.end > covered[0]
    assert [(s.start, s.end) for s in r.spans] == sorted((s.start, s.end) for s in r.spans)
    jsonschema.validate(json.loads(r.model_dump_json()), json_schema())


def test_score_many_batches_and_matches_scoring_one_at_a_time(scorer):
    items = [{"prompt": "Tell me something true.", "response": a} for a in ANSWERS]
    batched = scorer.score_many(items, progress=False)
    for item, b in zip(items, batched):
        one = scorer.score(item["prompt"], response=item["response"])
        assert [(s.start, s.end) for s in b.spans] == [(s.start, s.end) for s in one.spans]
        assert [s.u for s in b.spans] == pytest.approx([s.u for s in one.spans], abs=1e-4)
        assert b.u_seq == pytest.approx(one.u_seq, abs=1e-4)


def test_bad_input_is_a_clear_error_and_the_rest_of_a_batch_is_scored(scorer):
    with pytest.raises(InputError, match="prompt is empty"):
        scorer.score("   ")
    with pytest.raises(InputError, match="max_prompt_chars") as e:
        scorer.score("x" * 100_000)
    assert e.value.status == 413
    empty = scorer.score("Who?", response="")  # an empty answer is not an error: it is unverified, never "clean"
    assert empty.status == "unverified" and empty.status_reasons[0].code == "empty_answer" and empty.u_seq is None
    with pytest.raises(InputError, match="max_response_chars") as e:  # the hard limit on characters stays
        scorer.score("Who?", response="word " * 25_000)  # (longer than the context is read in chunks: test_windows)
    assert e.value.status == 413
    out = scorer.score_many([{"prompt": ""}, {"prompt": "Who?", "response": ANSWERS[1]}], progress=False,
                            return_errors=True)
    assert isinstance(out[0], InputError) and isinstance(out[1], ScoreResult) and out[1].spans


def test_score_prompt_generates_with_llamacpp_then_one_teacher_forced_pass(scorer):
    r = scorer.score("What is the capital of France?")
    assert r.answer_source == "generated" and r.generator == "llamacpp" and r.answer.strip()
    assert 0 < r.n_tokens <= 24 and r.timings.generate_s > 0 and r.timings.backbone_s > 0
    again = scorer.score(r.prompt, response=r.answer)  # the same answer given: the same spans and scores
    assert [(s.start, s.end, round(s.u, 4)) for s in again.spans] == [(s.start, s.end, round(s.u, 4)) for s in r.spans]
    scorer.generation.server.proc.kill()  # the llama.cpp server dies: the next request starts a new one
    scorer.generation.server.proc.wait()
    assert scorer.score(r.prompt).answer == r.answer


def test_hidden_states_captured_during_generation_equal_a_teacher_forced_pass(scorer):
    from spanuq.llm.states import extract_batch, generate_with_states

    chat, _ = scorer._chat("Name a planet.")
    g = generate_with_states(scorer.model, scorer.tok, chat, scorer.layers, 6, torch.float32)
    assert g.item is not None and g.truncated and len(g.token_ids) == 6
    tf = extract_batch(scorer.model, scorer.tok, [chat], [g.token_ids], scorer.layers, torch.float32)[0]
    assert torch.allclose(g.item.h, tf.h, atol=1e-3, rtol=1e-3)
    assert torch.allclose(g.item.entropy, tf.entropy, atol=1e-3)
    cut = generate_with_states(scorer.model, scorer.tok, chat, scorer.layers, 24, torch.float32, stop=[" "])
    assert not cut.truncated and " " not in cut.text and cut.item is not None  # a stop string ends the answer
    tf = extract_batch(scorer.model, scorer.tok, [chat], [cut.token_ids], scorer.layers, torch.float32)[0]
    assert cut.item.h.shape[0] == len(cut.token_ids) and torch.allclose(cut.item.h, tf.h, atol=1e-3, rtol=1e-3)
    scorer.generator = "hf"
    try:
        r = scorer.score("Name a planet.")
    finally:
        scorer.generator = "llamacpp"
    assert r.generator == "hf" and r.answer.strip() and r.timings.generate_s > 0


def test_load_from_an_mlflow_model_uri(probe_dir, make_cfg):
    from safetensors.torch import load_file

    from spanuq.pipeline import tracking
    from spanuq.score.registry import log_probe
    from spanuq.score.scorer import resolve_checkpoint
    from spanuq.score.shipped import shipped_dir

    cfg = make_cfg()
    with tracking.start_run(cfg, "probe"):
        log_probe(probe_dir, cfg, dev_auroc=0.7)
    local = resolve_checkpoint("models:/spanuq-smollm2-135m@champion", cfg)
    assert json.loads((local / "config.json").read_text()) == json.loads((probe_dir / "config.json").read_text())
    a, b = load_file(str(local / "model.safetensors")), load_file(str(probe_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # no probe trained under cfg's data/: the shipped one; a backbone with neither is a clear error
    assert resolve_checkpoint(None, cfg) == resolve_checkpoint("shipped", cfg) == shipped_dir("smollm2-135m")
    with pytest.raises(FileNotFoundError, match="no shipped probe for backbone 'qwen3-14b'.*make repro"):
        resolve_checkpoint(None, make_cfg("backbone.name=qwen3-14b"))


def test_a_given_answers_mapping_adds_each_spans_surprisal(probe_dir, tmp_path, repo_root):
    """A probe whose given-answer mapping reads the span's surprisal S and the entropy H₀ where it
    begins (`Calibration.for_source`) moves each span of a pasted answer by w·S − v·H₀ on the logit
    scale, both from the same teacher-forced pass: doubling (w, v) doubles each span's move, and the
    moves differ from span to span."""
    import shutil

    import numpy as np
    from scipy.special import logit

    from spanuq import SpanUQ
    from spanuq.config import load_config

    cfg = load_config(repo_root / "params.yaml", [f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}"])
    answer = "Marie Curie won the Nobel Prize in Physics in 1938 and in Chemistry in 1911."
    u = {}
    for w in (0.0, 0.25, 0.5):
        d = tmp_path / f"probe-w{w}"
        shutil.copytree(probe_dir, d)
        meta = json.loads((d / "config.json").read_text())
        meta["calibration"]["given"] = {"temperature": 1.0, "bias": 0.0, "flag": 0.5, "surprisal": w, "context": w}
        (d / "config.json").write_text(json.dumps(meta))
        with SpanUQ.load(d, cfg=cfg, threshold=0.0) as uq:
            r = uq.score("Who was Marie Curie?", response=answer)
        u[w] = np.array([s.u for s in r.spans])
    assert len(u[0.0]) >= 2 and all(len(v) == len(u[0.0]) for v in u.values())
    move_half, move_one = logit(u[0.25]) - logit(u[0.0]), logit(u[0.5]) - logit(u[0.0])
    assert np.allclose(move_one, 2 * move_half, atol=1e-3) and np.ptp(move_one) > 0.1


def test_a_given_answers_u_seq_is_its_spans_mean_and_the_mlflow_model_agrees(scorer, tmp_path, make_cfg):
    """A given answer's û_seq comes from its shown spans' calibrated û (`spanuq.score.answer_score`: their
    mean), not the probe's answer-level output, which barely moves on answers the backbone
    did not write; the backbone's own answers keep the probe's; the MLflow model gives the same."""
    import mlflow

    from spanuq import SpanUQ
    from spanuq.llm.loading import token_offsets
    from spanuq.llm.states import extract_batch
    from spanuq.model.calibration import Calibration
    from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
    from spanuq.pipeline import tracking
    from spanuq.score.registry import log_probe

    ckpt = load_checkpoint(scorer.checkpoint)
    given = {"temperature": 1.0, "bias": 0.0, "flag": 0.5, "surprisal": 0.2, "context": 0.1}
    probe = save_checkpoint(ckpt.probe, ckpt.probe.cfg, ckpt.d_model, tmp_path / "probe",
                            Calibration(validity_threshold=0.2, given=given), extra=ckpt.extra)
    uq = SpanUQ(load_checkpoint(probe), scorer.cfg, scorer.model, scorer.tok, probe)
    prompt, answer = "Who was Marie Curie?", "Marie Curie won the Nobel Prize in Physics in 1938 and in Chemistry in 1911."
    pasted, own = uq.score(prompt, response=answer), uq.score(prompt, response=answer, answer_source="generated")
    assert len(pasted.spans) >= 2
    assert pasted.u_seq == pytest.approx(sum(s.u for s in pasted.spans) / len(pasted.spans), abs=1e-9)
    assert own.u_seq != pytest.approx(sum(s.u for s in own.spans) / len(own.spans), abs=1e-3)  # the probe's own

    ids, offsets = token_offsets(scorer.tok, answer)
    item = extract_batch(scorer.model, scorer.tok, [uq._chat(prompt)[0]], [ids], scorer.layers, torch.float16)[0]
    cfg = make_cfg()
    with tracking.start_run(cfg, "given-u-seq"):
        log_probe(probe, cfg, dev_auroc=0.5)
    pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
    row = {"h": item.h.float().numpy(), "entropy": item.entropy.numpy(), "surprisal": item.surprisal.numpy(),
           "text": answer, "offsets": offsets}
    assert pyfunc.predict(row, params={"source": "given"})[0]["u_seq"] == pytest.approx(pasted.u_seq, abs=1e-4)
    assert pyfunc.predict(row)[0]["u_seq"] == pytest.approx(own.u_seq, abs=1e-4)
