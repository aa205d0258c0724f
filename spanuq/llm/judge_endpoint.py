"""The judge's endpoint, checked before any generation: a run with ``label.method: judge`` whose
judge is not there fails in seconds, naming what to fix, not in the label stage after hours of
decoding."""
from __future__ import annotations

import logging

from ..config import Config
from .openai_client import EndpointError, EndpointUnreachable, OpenAIClient

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0


class JudgeUnavailable(RuntimeError):
    """``label.method`` needs a judge and its endpoint does not answer (or its API key is not set)."""


def check_judge(cfg: Config) -> list[str] | None:
    """The judge's served models (None when ``label.method`` needs no judge); `JudgeUnavailable` when its
    endpoint cannot be reached or its API key variable is unset.  An endpoint without a model list (some
    providers answer ``/models`` with an error) passes with a warning: its first call will tell."""
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
        log.warning("the judge at %s lists %s, not label.judge.model=%s", j.base_url, ", ".join(models), j.model)
    return models
