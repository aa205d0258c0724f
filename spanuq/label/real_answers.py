"""The ``real-answers`` stage: the backbone's own answers to real questions with their sources, labelled
against the gold answers.

    spanuq real-answers                  # params.yaml `reader.own_answers`; writes data/<backbone>/real_answers.jsonl

For each XQuAD question of ``reader.own_answers`` (per split: how many, None = all), the backbone answers it
greedily after its paragraph, rendered as every other row with sources is (`spanuq.context.chat.context_chat`:
numbered in the system message — exactly what `SpanUQ.score(question, context=[paragraph])` writes after);
the teacher labels the answer against the gold answers with the label stage's reference rule
(`spanuq.label.offline.names_reference`: the answer names an accepted answer → right, else wrong).  The
train_reader stage fits the with-sources calibration of the backbone's own answers on the dev ones.  Answers
are cached per question (a killed run resumes); a generation that fails is an error, never a cached answer.
"""
from __future__ import annotations

import hashlib
import time

from tqdm.auto import tqdm

from ..config import Config
from ..context.chat import context_chat
from ..data.real import load_items
from ..generate.stage import decoding_settings, open_generator
from ..llm.loading import load_tokenizer
from ..pipeline.cache import ItemCache, content_hash
from ..pipeline.files import write_json, write_jsonl
from ..pipeline.paths import StagePaths
from .offline import names_reference

BATCH = 8


def questions(cfg: Config):
    """The XQuAD questions of ``reader.own_answers``, a stable choice by id within each split."""
    out = []
    for split, n in cfg.reader.own_answers.items():
        items = sorted(load_items("xquad", split), key=lambda it: hashlib.sha1(it.id.encode()).hexdigest())
        out += items if n is None else items[:n]
    return out


def run_real_answers(cfg: Config, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    paths = StagePaths.from_config(cfg)
    tok = load_tokenizer(cfg)
    todo = questions(cfg)
    cache = ItemCache(paths.stage_cache("real-answers"))
    chats = [context_chat(tok, it.question, it.sources, cfg.backbone.system_prompt) for it in todo]
    keys = [content_hash({"chat": c, "backbone": cfg.backbone.name, "decoding": decoding_settings(cfg)}) for c in chats]
    answers: dict[str, str] = {k: hit["answer"] for k in keys if (hit := cache.get(k)) is not None}
    missing = [i for i, k in enumerate(keys) if k not in answers]
    if missing:
        with open_generator(cfg) as gen:
            for b in tqdm(range(0, len(missing), BATCH), desc="own answers", unit="batch", disable=not progress):
                batch = missing[b: b + BATCH]
                for i, c in zip(batch, gen.greedy([chats[i] for i in batch])):
                    if c.error is not None:
                        raise RuntimeError(f"real-answers: generation failed for {todo[i].id}: {c.error}")
                    cache.put(keys[i], {"answer": c.text})
                    answers[keys[i]] = c.text
    rows = []
    for it, k in zip(todo, keys):
        a = answers[k]
        rows.append({"id": it.id, "split": it.split, "article": it.article, "question": it.question,
                     "sources": it.sources, "references": it.references, "answer": a,
                     "right": names_reference(a, it.references, cfg.label.term_min_score)})
    write_jsonl(paths.real_answers, rows)
    report = {"answers": len(rows), "right": sum(r["right"] for r in rows), "generated": len(missing),
              "seconds": round(time.perf_counter() - t0, 1)}
    write_json(paths.run_log("real-answers"), report)
    return report
