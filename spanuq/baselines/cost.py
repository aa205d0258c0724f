"""The cost column: wall time per answer on this machine, backbone forward passes and generated tokens.

Measured in the baselines stage's own run, on the test answers:

* SpanUQ: what ``score(prompt, response)`` does per answer, batch size 1: one
  teacher-forced backbone pass over [prompt; answer] (hidden states of the fused layers +
  entropy), then the probe and its post-processing (spans grown to words and placed in the
  text: one tokenisation of the answer).
* Decoding: the greedy answer (what every method starts from) and the S samples
  the sampling methods need, re-generated with the configured generate backend on
  ``baselines.cost_answers`` test answers (their seeds as in the generate stage), in a
  process of its own (as the generate stage runs).
  Token counts of the samples come from ``generations.jsonl`` over the whole
  test split.

"Added cost" is a method's cost on top of the greedy answer; "end to end"
includes decoding the greedy answer.

The counts (forward passes, generated tokens, NLI calls per answer) are what the inputs
determine and go to the stage's ``metrics.json``; the seconds are this machine's and this
run's, so `apart_seconds` moves them to the stage's run log (``runs/baselines.json``): the same
inputs then give the same ``metrics.json`` bytes and ``dvc.lock`` does not move.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..config import Config
from ..features.dataset import ResponseExample
from ..model.calibration import Calibration
from .context import AnswerInfo


def time_spanuq(cfg: Config, backbone, tokenizer, probe, calibration: Calibration, examples: list[ResponseExample],
                infos: list[AnswerInfo], device) -> dict:
    """Per answer: one teacher-forced extraction pass + the probe and its post-processing (batch 1)."""
    from ..llm.presets import fused_layers
    from ..llm.states import extract_batch
    from ..model.postprocess import Answer, predict

    layers = fused_layers(cfg)
    dtype = getattr(torch, cfg.extract.dtype)
    t_extract, t_probe = [], []
    for e, info in zip(examples, infos):
        t0 = time.perf_counter()
        item = extract_batch(backbone, tokenizer, [info.chat_prompt], [list(e.token_ids)], layers, dtype)[0]
        t1 = time.perf_counter()
        predict(probe, [item], calibration, [Answer.of(tokenizer, e.response, e.token_ids)], batch_size=1,
                device=device)
        t2 = time.perf_counter()
        t_extract.append(t1 - t0)
        t_probe.append(t2 - t1)
    n = max(len(examples), 1)
    return {"seconds_per_answer": float(np.sum(t_extract) + np.sum(t_probe)) / n,
            "extract_seconds_per_answer": float(np.sum(t_extract)) / n,
            "probe_seconds_per_answer": float(np.sum(t_probe)) / n,
            "forward_passes_per_answer": 1.0, "generated_tokens_per_answer": 0.0, "n_answers": len(examples)}


def apart_seconds(metrics: dict) -> tuple[dict, dict]:
    """(metrics without wall-clock figures, those figures in the same nesting).  A figure is wall
    clock when its key names seconds; the SelfCheckGPT-NLI / SpanUQ ``ratio`` is one of seconds."""
    def split(node):
        if not isinstance(node, dict):
            return node, None
        kept, moved = {}, {}
        for k, v in node.items():
            if "seconds" in k or k == "ratio":
                moved[k] = v
                continue
            kept[k], m = split(v)
            if m:
                moved[k] = m
        return kept, moved

    return split(metrics)


def time_decoding(cfg: Config, infos: list[AnswerInfo]) -> dict:
    """Greedy and S-sample decoding time per answer with the configured generate backend, measured in a
    process of its own (`spanuq.pipeline.child`) that ends before the stage loads its backbone: vLLM reserves
    its share of the card at start-up (and does not start beside a model), and its memory is the card's again
    when the process exits."""
    from ..llm.loading import live_backbones
    from ..pipeline.child import run_in_child

    if live_backbones():
        raise RuntimeError("decoding is timed before this process loads a backbone: the timer's vLLM starts on "
                           "the same card and would find the backbone's memory taken")
    return run_in_child("spanuq.baselines.cost:decoding_times", cfg,
                        {"prompts": [[i.chat_prompt, i.prompt_id] for i in infos]})


def decoding_times(cfg: Config, prompts: list[list[str]]) -> dict:
    """`time_decoding`'s measurement, in the child: ``prompts`` are [chat prompt, prompt id] pairs."""
    from ..generate.stage import open_generator, prompt_seed

    S = cfg.generate.n_samples
    t_greedy, t_samples = [], []
    t_start = time.perf_counter()
    with open_generator(cfg) as gen:
        startup = time.perf_counter() - t_start
        for chat, prompt_id in prompts:
            t0 = time.perf_counter()
            gen.greedy([chat])
            t1 = time.perf_counter()
            gen.sample([chat], S, [prompt_seed(cfg.generate.seed, prompt_id)])[0]
            t2 = time.perf_counter()
            t_greedy.append(t1 - t0)
            t_samples.append(t2 - t1)
    return {"backend": cfg.generate.backend, "n_answers": len(prompts), "n_samples": S,
            "greedy_seconds_per_answer": float(np.mean(t_greedy)) if t_greedy else None,
            "samples_seconds_per_answer": float(np.mean(t_samples)) if t_samples else None,
            "backend_startup_seconds": round(startup, 2)}
