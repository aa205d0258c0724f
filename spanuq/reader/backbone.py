"""The backbone's readings of an answer's words: how likely the frozen LLM finds each, with the sources and without.

For an answer read after a question with sources, each answer word w (its tokens t, `answer_words`) gets

    given(w)   = −Σ_{t∈w} log p(t | question + the TOP source sentences most like the answer, answer before t)
    without(w) = −Σ_{t∈w} log p(t | question, answer before t)
    change(w)  = given(w) − without(w)                  (below 0: the sources make the word likelier)

— `BACKBONE_FEATURES`, read beside the cheap features when the reader was trained with them
(``reader.backbone_readings``).  The sources are rendered as the product renders them
(`spanuq.context.chat.question_chat`): all of them when they are at most TOP sentences, else the TOP sentences
whose encoder embedding is most like "question answer", in their order, as one passage — a fixed, short read
whatever the sources' length, so the two teacher-forced passes cost the same beside 80 tokens of sources or 8,000.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pipeline.cache import content_hash
from .features import BACKBONE_FEATURES, source_sentences

TOP = 5  # source sentences read by the backbone when the sources have more


@dataclass(frozen=True)
class Backbone:
    """The frozen LLM the readings come from: its transformers model, tokenizer and the system prompt its chats carry."""

    model: object
    tok: object
    system_prompt: str | None = None


def readings_key(passages: list[str], answer: str, question: str | None, top: int = TOP) -> str:
    """What determines an answer's readings (a cache key; the backbone is the cache's own)."""
    return content_hash({"readings": 1, "sources": list(passages), "answer": answer, "question": question, "top": top})


def read_sources(encoder, passages: list[str], answer: str, question: str | None, top: int = TOP) -> list[str]:
    """The sources as the backbone reads them (module docstring)."""
    sents, _ = source_sentences(passages)
    if len(sents) <= top:
        return list(passages)
    enc = encoder.encode(sents + [f"{question} {answer}"])
    sims = np.stack([e.sentence for e in enc[:-1]]) @ enc[-1].sentence
    keep = sorted(np.argsort(-sims)[:top])
    return [" ".join(sents[i] for i in keep)]


def backbone_rows(backbone: Backbone, encoder, passages: list[str], answer: str, question: str | None,
                  words: list[tuple[int, int]], top: int = TOP, cache=None) -> np.ndarray:
    """(len(words), 3): `BACKBONE_FEATURES` of each of ``words`` (character spans of ``answer``); ``cache``: an
    `ItemCache` the readings are kept in (a training run's; the product reads afresh)."""
    from ..context.chat import question_chat
    from ..llm.loading import chat_prompt, token_ids, token_offsets
    from ..llm.states import token_logprobs

    key = readings_key(passages, answer, question, top)
    hit = None if cache is None else cache.get(key)
    if hit is not None:
        return np.asarray(hit, np.float32).reshape(-1, len(BACKBONE_FEATURES))
    tok, q = backbone.tok, question or ""
    ids, offsets = token_offsets(tok, answer)
    given = alone = np.zeros(0)
    if ids:
        with_src = token_ids(tok, question_chat(tok, q, read_sources(encoder, passages, answer, question, top),
                                                backbone.system_prompt).chat)
        without = token_ids(tok, chat_prompt(tok, q, backbone.system_prompt))
        given, alone = token_logprobs(backbone.model, [with_src, without], [ids, ids], tok.pad_token_id or 0)
    rows = []
    for s, e in words:
        sel = [k for k, (a, b) in enumerate(offsets) if a < e and b > s]
        g, o = float(-given[sel].sum()), float(-alone[sel].sum())
        rows.append([g, o, g - o])
    if cache is not None:
        cache.put(key, rows)
    return np.asarray(rows, np.float32).reshape(-1, len(BACKBONE_FEATURES))
