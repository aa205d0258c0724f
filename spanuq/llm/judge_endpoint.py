"""What the label stage will need, checked before any generation: a run whose judge, corpus or NLI
model is not there fails in seconds, naming the setting to fix, not in the label stage after hours of
decoding.

    preflight(cfg)   # spanuq generate runs it first; so does the Prefect pipeline flow (check_judge)

* ``label.method: judge``: the endpoint answers (`check_judge`) and lists ``label.judge.model``;
* ``label.corpus``: the passages file is there; `gpu-paper` (the paper verifies claims against Wikipedia
  passages) needs one (`check_corpus`);
* ``label.alignment: nli``: ``label.nli_model`` loads — a folder with its config, tokenizer and
  weights, or a hub id whose files are in the local cache when the hub is offline (`check_nli`).
"""
from __future__ import annotations

import logging
from pathlib import Path

from ..config import Config
from .openai_client import EndpointError, EndpointUnreachable, OpenAIClient

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


class PreflightError(RuntimeError):
    """A setting the label stage needs cannot work; the message names it and how to fix it."""


class JudgeUnavailable(PreflightError):
    """``label.method`` needs a judge and its endpoint does not answer, does not serve ``label.judge.model``,
    or its API key is not set."""


def preflight(cfg: Config) -> None:
    """Every check of this module, the quick file checks first."""
    check_corpus(cfg)
    check_nli(cfg)
    check_judge(cfg)


def check_judge(cfg: Config) -> list[str] | None:
    """The judge's served models (None when ``label.method`` needs no judge); `JudgeUnavailable` when its
    endpoint cannot be reached, its API key variable is unset, or it lists models and ``label.judge.model``
    is not one of them (every judge call would fail).  An endpoint without a model list (some providers
    answer ``/models`` with an error) passes with a warning: its first call will tell."""
    if cfg.label.method != "judge":
        return None
    j = cfg.label.judge
    fix = ("start the judge (any OpenAI-compatible server: `vllm serve MODEL --port 8081`, a provider's URL) and set "
           "label.judge.base_url / label.judge.model, or label.method=offline (docs/gpu.md)")
    try:
        client = OpenAIClient(j.base_url, j.api_key_env, timeout_s=min(j.timeout_s, CHECK_TIMEOUT_S), max_retries=0)
    except EndpointError as e:  # the key's variable is unset
        raise JudgeUnavailable(f"label.method=judge: {e}; {fix}") from None
    try:
        models = client.check()
    except EndpointUnreachable as e:
        raise JudgeUnavailable(f"label.method=judge, and the judge does not answer: {e}. Checked before generating, "
                               f"so no decoding is lost: {fix}") from None
    except EndpointError as e:
        log.warning("judge endpoint %s lists no models (%s); its first call will tell whether it serves %s",
                    j.base_url, e, j.model)
        return []
    finally:
        client.close()
    if models and j.model not in models:
        raise JudgeUnavailable(f"label.judge.model={j.model} is not a model the judge at {j.base_url} serves (its "
                               f"/models lists {', '.join(models)}): set label.judge.model to one of them")
    return models


def check_corpus(cfg: Config) -> None:
    """``label.corpus``, when set, is a file (the index stage reads it after generation); `gpu-paper`'s
    judge verifies against passages, as the paper's does, so it needs one (elsewhere a judge without a
    corpus verifies closed-book, with a warning from the label stage)."""
    corpus = cfg.label.corpus
    if corpus and not Path(corpus).is_file():
        raise PreflightError(f"label.corpus={corpus}: no such file (the passages the judge verifies claims against, "
                             "JSONL with id, title?, text per line); set label.corpus to it, or label.corpus=null")
    if not corpus and cfg.label.method == "judge" and cfg.preset == "gpu-paper":
        raise PreflightError("label.corpus is not set: gpu-paper's judge verifies each claim against retrieved "
                             "passages, as the paper does (Wikipedia, BM25); set label.corpus to a JSONL of passages "
                             "(id, title?, text per line)")


def check_nli(cfg: Config) -> None:
    """``label.alignment: nli``: ``label.nli_model`` has a config with an entailment class, a tokenizer and
    weights where this machine can load them.  Offline (``HF_HUB_OFFLINE``), a hub id's files must be in
    the local cache; online, its config and tokenizer come now and its weights in the label stage."""
    if cfg.label.alignment != "nli":
        return
    from huggingface_hub import is_offline_mode, try_to_load_from_cache
    from transformers import AutoConfig, AutoTokenizer

    name = cfg.label.nli_model
    where = "in the local cache (the hub is offline: HF_HUB_OFFLINE)" if is_offline_mode() else "on the hub"
    fix = ("set label.nli_model to an NLI model's hub id or folder (e.g. microsoft/deberta-large-mnli, downloaded "
           "once with the hub online), or label.alignment=embedding")
    try:
        config = AutoConfig.from_pretrained(name)
        AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as e:
        raise PreflightError(f"label.nli_model={name} cannot be loaded: not a folder and not {where} "
                             f"({str(e).splitlines()[0]}); {fix}") from None
    if not any(str(label).lower().startswith("entail") for label in (config.label2id or {})):
        raise PreflightError(f"label.nli_model={name} has no entailment class (its labels: {config.label2id}): "
                             f"not an NLI model; {fix}")
    folder = Path(name)
    if folder.is_dir():
        found = any((folder / w).exists() for w in WEIGHTS)
    else:
        found = any(isinstance(try_to_load_from_cache(name, w), str) for w in WEIGHTS) or not is_offline_mode()
    if not found:
        raise PreflightError(f"label.nli_model={name} has no weights {where}; {fix}")
