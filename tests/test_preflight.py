"""Before hours of generation, what the label stage will need (spanuq/llm/judge_endpoint.py): the judge
serves ``label.judge.model``, ``label.corpus`` is a file (and gpu-paper has one), ``label.nli_model``
loads here.  Each failure is an error naming its setting, raised by `spanuq generate` before it decodes.
Real pieces: the scripted judge server (tests/judge_server.py), files that are or are not there, an NLI
model built from a config."""
from __future__ import annotations

import json

import pytest

from judge_server import ScriptedJudge


@pytest.fixture
def judge():
    with ScriptedJudge() as server:
        yield server


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "passages.jsonl"
    f.write_text(json.dumps({"id": "p1", "title": "Paris", "text": "Paris is the capital of France."}) + "\n")
    return f


@pytest.fixture(scope="module")
def nli_folder(tmp_path_factory):
    """A random-weight BERT NLI classifier saved with its tokenizer (offline, from a config)."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tmp_path_factory.mktemp("nli")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "france"]) + "\n")
    BertTokenizerFast(vocab_file=str(d / "vocab.txt")).save_pretrained(d)
    labels = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}
    BertForSequenceClassification(BertConfig(vocab_size=7, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32, num_labels=3, label2id=labels,
                                             id2label={i: k for k, i in labels.items()})).save_pretrained(d)
    return d


def judged(make_cfg, judge, *more: str):
    return make_cfg("label.method=judge", f"label.judge.base_url={judge.base_url}", *more)


def test_generation_stops_when_the_judge_does_not_serve_the_configured_model(make_cfg, judge):
    from spanuq.generate.stage import run_generate
    from spanuq.llm.judge_endpoint import JudgeUnavailable

    cfg = judged(make_cfg, judge, "label.judge.model=Qwen/Qwen3-32B")
    with pytest.raises(JudgeUnavailable, match=r"label.judge.model=Qwen/Qwen3-32B .* lists scripted-judge"):
        run_generate(cfg, progress=False)
    assert [r for r in judge.requests if "messages" in r] == []  # asked for its model list only


def test_generation_stops_when_the_corpus_file_is_not_there(make_cfg, judge, tmp_path):
    from spanuq.generate.stage import run_generate
    from spanuq.llm.judge_endpoint import PreflightError

    cfg = judged(make_cfg, judge, "label.judge.model=scripted-judge", f"label.corpus={tmp_path / 'wiki.jsonl'}")
    with pytest.raises(PreflightError, match=r"label.corpus=.*wiki.jsonl: no such file"):
        run_generate(cfg, progress=False)


def test_gpu_paper_needs_a_corpus_to_verify_against(make_cfg, judge, corpus):
    """The paper's judge verifies against passages; a closed-book judge is another experiment."""
    from spanuq.llm.judge_endpoint import PreflightError, preflight

    paper = ("preset=gpu-paper", "label.judge.model=scripted-judge", "label.alignment=embedding")
    with pytest.raises(PreflightError, match="label.corpus is not set: gpu-paper"):
        preflight(judged(make_cfg, judge, *paper))
    preflight(judged(make_cfg, judge, *paper, f"label.corpus={corpus}"))


def test_the_nli_model_must_load_here_before_generation(make_cfg, nli_folder, tmp_path, monkeypatch):
    """gpu-paper aligns sample claims with an NLI model: a hub id the offline hub cache does not hold, a
    folder without weights or a model without an entailment class is an error now, not after decoding."""
    from spanuq.llm.judge_endpoint import PreflightError, preflight

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nli = ("label.alignment=nli",)
    preflight(make_cfg(*nli, f"label.nli_model={nli_folder}"))
    with pytest.raises(PreflightError, match=r"label.nli_model=microsoft/deberta-large-mnli cannot be loaded: .* "
                                             r"local cache"):
        preflight(make_cfg(*nli, "label.nli_model=microsoft/deberta-large-mnli"))
    bare = tmp_path / "no-weights"
    bare.mkdir()
    for f in nli_folder.iterdir():
        if f.name != "model.safetensors":
            (bare / f.name).write_bytes(f.read_bytes())
    with pytest.raises(PreflightError, match=r"label.nli_model=.*no-weights has no weights"):
        preflight(make_cfg(*nli, f"label.nli_model={bare}"))
    config = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**config, "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
                                                  "id2label": {"0": "NEGATIVE", "1": "POSITIVE"}}))
    with pytest.raises(PreflightError, match="no entailment class"):
        preflight(make_cfg(*nli, f"label.nli_model={bare}"))
