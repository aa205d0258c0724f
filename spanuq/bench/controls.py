"""The controls beside the probe: cheap cues that a figure on human labels must beat.

Each returns, per answer, one score per character in [0, 1] (`chars.py` turns it into the
task's labels):

* ``mark_all``: every character 1 (the organisers' "mark all" baseline).
* ``random_words``: each whitespace-separated word a uniform random score, seeded per answer
  by (seed, id), so a split's figures do not depend on item order.
* ``entities_numbers``: 1 on spaCy named entities and on numbers (regex), 0 elsewhere: a
  text-only tagger, no model of the answer's correctness.
* ``claim_units``: 1 on the offline teacher's claim anchors (`spanuq.label.units.extract_units`:
  entities, dates, numbers and one noun chunk per clause), the spans the probe was trained to
  find, with no notion of which are wrong: the text-only control closest to the probe's spans.
* ``token_entropy``: the backbone's next-token entropy of each answer token, read
  teacher-forced after the chat-templated question, divided by log |V| (so in [0, 1]),
  spread over the token's characters; ``word_max`` variant: the word's largest value.
* ``u_seq``: the probe's answer-level û_seq on every character (sequence-level only).
"""
from __future__ import annotations

import math
import re
import zlib

import numpy as np

from .chars import spans_to_chars, token_values_to_chars

NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
WORD = re.compile(r"\S+")


def mark_all(texts: list[str]) -> list[np.ndarray]:
    return [np.ones(len(t)) for t in texts]


def word_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in WORD.finditer(text)]


def random_words(texts: list[str], ids: list[str], seed: int = 0) -> list[np.ndarray]:
    out = []
    for t, i in zip(texts, ids):
        rng = np.random.default_rng([seed, zlib.crc32(i.encode())])
        v = np.zeros(len(t))
        for s, e in word_spans(t):
            v[s:e] = rng.random()
        out.append(v)
    return out


def entity_number_spans(nlp, texts: list[str]) -> list[list[tuple[int, int]]]:
    """Character spans of spaCy entities and regex numbers, per text."""
    out = []
    for t, doc in zip(texts, nlp.pipe(texts)):
        spans = [(e.start_char, e.end_char) for e in doc.ents]
        spans += [m.span() for m in NUMBER.finditer(t)]
        out.append(spans)
    return out


def entities_numbers(nlp, texts: list[str]) -> list[np.ndarray]:
    return [spans_to_chars(s, len(t)) for s, t in zip(entity_number_spans(nlp, texts), texts)]


def claim_units(nlp, texts: list[str], min_chars: int = 3, max_units: int = 32) -> list[np.ndarray]:
    from ..label.units import extract_units

    return [spans_to_chars([(u.start, u.end) for u in extract_units(doc, min_chars, max_units)], len(t))
            for t, doc in zip(texts, nlp.pipe(texts))]


def word_max(text: str, v: np.ndarray) -> np.ndarray:
    """Each word's characters get the word's largest value (whitespace keeps its own)."""
    out = v.copy()
    for s, e in word_spans(text):
        out[s:e] = v[s:e].max()
    return out


def token_entropy_chars(model, tokenizer, chats: list[str | None], texts: list[str], batch_size: int = 4,
                        progress: bool = True) -> list[np.ndarray | None]:
    """Per-character normalised token entropy of each answer (None where ``chats[i]`` is None:
    an answer the probe could not read either)."""
    from tqdm.auto import tqdm

    from ..llm.states import teacher_forced, token_entropy
    from ..llm.loading import token_offsets

    log_v = math.log(len(tokenizer))
    enc = [token_offsets(tokenizer, t) for t in texts]
    out: list[np.ndarray | None] = [None] * len(texts)
    todo = sorted((i for i, c in enumerate(chats) if c is not None), key=lambda i: len(enc[i][0]))
    for s in tqdm(range(0, len(todo), batch_size), desc="token entropy", unit="batch", disable=not progress):
        batch = todo[s: s + batch_size]
        pairs = teacher_forced(model, tokenizer, [chats[i] for i in batch], [enc[i][0] for i in batch], layers=[0])
        for i, (_, logits) in zip(batch, pairs):
            h = (token_entropy(logits).numpy() / log_v).clip(0, 1)
            out[i] = token_values_to_chars(enc[i][1], h, len(texts[i]))
    return out
