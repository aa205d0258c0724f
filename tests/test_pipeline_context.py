"""Prompt rows with sources (``context``) through the pipeline: answered with the sources in the
backbone's input, labelled from the sources, read over exactly the input the scorer renders, and
calibrated apart (docs/context.md "In the pipeline")."""
import json

import pytest

from spanuq.data.grounded import grounded_prompts, grounded_rows
from spanuq.pipeline.records import Generation, Prompt, Sample

SYSTEM = "You are a helpful assistant. Answer factually in two or three sentences."


def _row(case: str) -> Prompt:
    """The first grounded training row of a case (``ab``: the source states the fact, ``d``: it is silent)."""
    return next(p for p in grounded_rows() if p.meta["grounded_case"] == case)


def test_grounded_rows_come_from_the_training_pairs_never_the_bench_and_never_go_to_test():
    from spanuq.bench.grounded import PAIRS, read_pairs

    rows = grounded_prompts(12, seed=0)
    bench = {p.group for p in read_pairs(PAIRS)}
    assert len(rows) == 12 and all(p.context and p.split in ("train", "dev") for p in rows)
    assert {p.meta["grounded_case"] for p in rows} == {"ab", "c", "d"}
    assert not {p.meta["group"] for p in rows} & bench
    assert [p.id for p in grounded_prompts(6, seed=0)] == [p.id for p in rows[:6]]  # a smaller N: a prefix
    assert _row("d").references == [] and _row("ab").references  # a silent source backs no reference


def test_a_row_with_sources_is_answered_with_them_in_the_backbones_input(make_cfg, tmp_path):
    """The generate stage renders a row's sources as `SpanUQ.score(..., context=...)` does (numbered in the
    system message); a row without sources keeps the plain chat."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    from spanuq.context.passages import as_passages
    from spanuq.context.render import render_windows
    from spanuq.generate.stage import generate_all
    from spanuq.llm.loading import chat_prompt, load_tokenizer

    row = _row("ab")
    plain = Prompt(id="plain", domain="triviaqa", text=row.text)
    cfg = make_cfg("generate.backend=llamacpp", "generate.n_samples=1", "generate.max_new_tokens=24",
                   "generate.sample_max_new_tokens=8", "generate.llamacpp_ctx=512", "generate.llamacpp_slots=2")
    gens, _ = generate_all(cfg, [row, plain], cache_dir=tmp_path / "gen", progress=False)
    tok = load_tokenizer(cfg)
    scorer_input = render_windows(tok, [{"role": "user", "content": row.text}], as_passages(row.context, 10**6, 64),
                                  4096, SYSTEM)
    assert len(scorer_input) == 1 and gens[0].chat_prompt == scorer_input[0].chat
    assert f"Sources:\n[1] {row.context[0]}" in gens[0].chat_prompt and gens[0].greedy.text.strip()
    assert gens[1].chat_prompt == chat_prompt(tok, row.text, SYSTEM) and "Sources:" not in gens[1].chat_prompt


def _gen(prompt: Prompt, answer: str, samples: list[str]) -> Generation:
    from spanuq.llm.loading import response_token_ids

    tok = _tokenizer()
    return Generation(prompt_id=prompt.id, backbone="smollm2-135m", prompt_text=prompt.text, chat_prompt="",
                      greedy=Sample(text=answer, token_ids=response_token_ids(tok, answer)),
                      samples=[Sample(text=s, token_ids=response_token_ids(tok, s)) for s in samples],
                      decoding={}, seed=0)


def _tokenizer():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_tokenizer

    return load_tokenizer(load_config(None))


def _labelled(labeller, prompt: Prompt, answer: str, samples: list[str]) -> dict[str, float]:
    return {answer[c.start:c.end]: c.u for c in labeller.label(_gen(prompt, answer, samples), prompt).claims}


def test_a_row_with_sources_is_labelled_from_the_source_not_from_the_backbones_samples(make_cfg):
    from spanuq.label.align import make_aligner
    from spanuq.label.offline import OfflineLabeller

    cfg = make_cfg()
    labeller = OfflineLabeller(cfg.label, make_aligner(cfg.label))
    row = _row("ab")
    pair = json.loads(row.meta["twins"])[0]  # case a: the wrong value is mentioned elsewhere in the source
    right = pair["answer"][slice(*pair["slot"])]
    planted = pair["answer"].replace(right, pair["wrong"])
    # the samples all repeat the planted value: self-consistency would back it, the source does not
    said = _labelled(labeller, row, planted, [planted] * 3)
    assert pair["wrong"] in row.context[0] and said[pair["wrong"]] == pytest.approx(1.0)
    # the samples all say another value: the source states the right one
    said = _labelled(labeller, row, pair["answer"], [planted] * 3)
    assert said[right] == pytest.approx(0.0)
    # the source is silent on the fact: a right answer the samples all repeat is unsupported
    silent = _row("d")
    twin = json.loads(silent.meta["twins"])[0]
    fact = twin["answer"][slice(*twin["slot"])]
    assert _labelled(labeller, silent, twin["answer"], [twin["answer"]] * 3)[fact] == pytest.approx(1.0)


def test_the_extract_stage_reads_a_row_with_sources_over_the_input_the_scorer_reads(make_cfg, scorer, monkeypatch):
    """A row's answer is read after its rendered sources: the stored states are those
    `SpanUQ.score(prompt, response, context=...)` reads for the same answer."""
    import torch

    from spanuq.features.stage import run_extract
    from spanuq.features.store import FeatureStore
    from spanuq.generate.stage import run_generate
    from spanuq.llm.prefix import PrefixCache
    from spanuq.pipeline.files import read_records, write_jsonl
    from spanuq.pipeline.paths import StagePaths

    row = _row("ab")
    pair = json.loads(row.meta["twins"])[0]
    given = row.model_copy(update={"response": pair["answer"]})  # a given answer: its states, not a decode's
    cfg = make_cfg("generate.backend=llamacpp", "generate.n_samples=1", "generate.max_new_tokens=8",
                   "generate.sample_max_new_tokens=8", "generate.llamacpp_ctx=512", "generate.llamacpp_slots=1")
    paths = StagePaths.from_config(cfg)
    write_jsonl(paths.prompts, [given])
    run_generate(cfg, progress=False)
    run_extract(cfg, progress=False)
    stored = FeatureStore(paths.features)[row.id]
    read = []

    def spy(self, prompt_ids, ids, sources=None):  # the scorer reads an answer with sources on its prompt's KV cache
        out = real(self, prompt_ids, ids, sources)
        read.append((list(prompt_ids), out))
        return out

    real = PrefixCache.read
    monkeypatch.setattr(PrefixCache, "read", spy)
    scorer.score(row.text, response=pair["answer"], context=row.context)
    (prompt_ids, states), = read
    gen, = read_records(paths.generations, Generation)
    assert "Sources:" in gen.chat_prompt
    assert prompt_ids == scorer.tok(gen.chat_prompt, add_special_tokens=False)["input_ids"]
    assert stored.token_ids.tolist() == states.token_ids.tolist()
    torch.testing.assert_close(stored.h.float(), states.h.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(stored.entropy.float(), states.entropy.float(), atol=2e-2, rtol=2e-2)


def _examples(n: int, seed: int):
    """Own dev answers read with sources, random states, spans labelled both ways."""
    import torch

    from spanuq.features.dataset import ResponseExample

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        u = torch.tensor([float(i % 2), float((i + 1) % 3 == 0)])
        out.append(ResponseExample(f"r{i}", "triviaqa", "dev", torch.randn(12, 16, generator=g), torch.rand(12, generator=g),
                                   list(range(12)), torch.tensor([[1, 3], [6, 8]]), u, float(u.mean()),
                                   meta={"context": True}))
    return out


def test_own_answers_with_sources_get_their_own_calibration_which_the_scorer_picks(make_cfg, tmp_path):
    import torch

    from spanuq.model.checkpoint import load_checkpoint, save_checkpoint
    from spanuq.model.calibration import Calibration
    from spanuq.model.probe import SpanUQProbe
    from spanuq.train.context_calibration import calibrate_generated_with_context, split_context

    cfg = make_cfg()
    torch.manual_seed(0)
    probe = SpanUQProbe(cfg.probe, 16)
    own = Calibration(temperature=1.5, validity_threshold=0.0, flag=0.6)
    without = _examples(1, 1)[0]
    without.meta = {}
    plain, with_sources = split_context([without] + _examples(12, 0))
    assert plain == [without] and len(with_sources) == 12
    fitted, info = calibrate_generated_with_context(probe, with_sources, own, cfg, "cpu")
    assert info["used"] and info["spans"] == 24
    saved = load_checkpoint(save_checkpoint(probe, cfg.probe, 16, tmp_path / "probe", fitted)).calibration
    entry = saved.grounded["generated"]
    picked = saved.for_source("generated", grounded=True)
    assert (picked.temperature, picked.bias, picked.flag) == (entry["temperature"], entry["bias"], entry["flag"])
    assert saved.fitted_for("generated", grounded=True) == "generated+context"
    assert saved.for_source("generated").temperature == 1.5  # without sources: the own-answer mapping
    # too few spans with sources: nothing fitted, and the report says why
    kept, info = calibrate_generated_with_context(probe, _examples(2, 0), own, cfg, "cpu")
    assert kept is own and not info["used"]


def test_the_judge_labels_a_row_with_sources_against_its_passages_not_the_samples(make_cfg):
    from judge_server import ScriptedJudge

    from spanuq.label.stage import run_label
    from spanuq.pipeline.files import read_records, write_jsonl
    from spanuq.pipeline.paths import StagePaths
    from spanuq.pipeline.records import LabeledResponse

    source = "Canberra has been the capital of Australia since 1913."
    row = Prompt(id="au", domain="longform_qa", text="What is the capital of Australia?", context=[source])
    answer = "The capital of Australia is Canberra."
    with ScriptedJudge(truths=("Canberra",)) as server:
        cfg = make_cfg("label.method=judge", f"label.judge.base_url={server.base_url}", "label.judge.backoff_s=0.01",
                       "label.sample_answers=0")  # the one row's answer alone
        paths = StagePaths.from_config(cfg)
        write_jsonl(paths.prompts, [row])
        write_jsonl(paths.generations, [_gen(row, answer, ["The capital of Australia is Sydney."] * 3)])
        run_label(cfg, progress=False)
        asked = json.dumps(server.requests)
    label, = read_records(paths.labels, LabeledResponse)
    assert {s.text: s.u for s in label.spans}["Canberra"] == 0.0 and label.with_context
    assert source in asked and "Sydney" not in asked  # verified against the passage; the samples never read


def test_a_users_prompt_file_may_give_each_question_its_sources(tmp_path):
    from spanuq.data.prompts import load_prompt_file

    f = tmp_path / "rows.jsonl"
    rows = [{"text": "When was the tower finished?", "context": ["The tower was finished in 1889."]},
            {"text": "When was the tower finished?", "context": [{"id": "w", "text": "It opened in March 1889."}]},
            {"text": "When was the tower finished?"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with_sources, other_sources, plain = load_prompt_file(f)
    assert with_sources.context == ["The tower was finished in 1889."] and plain.context is None
    assert len({with_sources.id, other_sources.id, plain.id}) == 3  # other sources: another prompt
    assert "context" not in plain.model_dump(mode="json")  # a row without sources is written as before
    f.write_text(json.dumps({"text": "When?", "context": []}) + "\n")
    with pytest.raises(ValueError, match=r"rows.jsonl:1: context is an empty list"):
        load_prompt_file(f)


def test_a_probe_trained_elsewhere_gets_only_the_mapping_of_its_own_answers_with_sources(make_cfg, tmp_path,
                                                                                         monkeypatch):
    """`spanuq recalibrate --grounded-generated --probe DIR`: fitted on a run's dev answers written with sources,
    checked on its train ones; the weights and every other entry stay as they were."""
    import dataclasses

    import torch

    from spanuq.model.calibration import Calibration
    from spanuq.model.checkpoint import save_checkpoint
    from spanuq.model.probe import SpanUQProbe
    from spanuq.pipeline.files import sha256_file
    from spanuq.pipeline.paths import StagePaths
    from spanuq.train import recalibrate

    cfg = make_cfg()
    torch.manual_seed(0)
    shipped = save_checkpoint(SpanUQProbe(cfg.probe, 16), cfg.probe, 16, tmp_path / "shipped",
                              Calibration(temperature=1.5, given={"temperature": 2.0, "bias": 0.1, "flag": 0.5}))
    before, weights = json.loads((shipped / "config.json").read_text()), sha256_file(shipped / "model.safetensors")
    # the run's stored answers, as load_examples returns them: a split each (dev fits, train checks)
    monkeypatch.setattr(recalibrate, "load_examples", lambda features, labels, splits, given=False: [
        dataclasses.replace(e, split=splits[0]) for e in _examples(12, 0 if splits == ("dev",) else 1)])
    monkeypatch.setattr(recalibrate, "load_tokenizer", lambda cfg: None)  # random token ids: no text to place

    written = recalibrate.recalibrate_generated_with_context(cfg, shipped)
    after = json.loads((shipped / "config.json").read_text())
    fit = written["fit"]
    assert after["calibration"]["grounded"] == {"generated": {k: fit[k] for k in ("temperature", "bias", "flag")}}
    assert {k: v for k, v in after["calibration"].items() if k != "grounded"} == before["calibration"]
    assert sha256_file(shipped / "model.safetensors") == weights
    check = written["check"]
    assert check["split"] == "train" and check["answers"] == 12
    assert "auroc" in check["with_this_mapping"]["span"] and "auroc" in check["with_the_mapping_without_sources"]["span"]
    assert json.loads((shipped / "grounded_generated.json").read_text())["fit"] == json.loads(json.dumps(fit))
    with pytest.raises(ValueError, match="own probe"):  # its train stage fits this, and it read the train split
        recalibrate.recalibrate_generated_with_context(cfg, StagePaths.from_config(cfg).probe)
