"""Sharded safetensors storage of fused hidden states, memory-mapped on read.

Layout of a feature folder::

    index.json          {"meta": {...}, "shards": {name: sha256}, "items": {prompt_id: [shard, offset, length]}}
    shard-00000.safetensors   h (N, d) fp16|bf16, entropy (N,) fp32, surprisal (N,) fp32, token_ids (N,) int32

Only the fused mean of the chosen layers is stored (paper Eq. 1): fusion is a
mean, so this is lossless for the probe and |L| times smaller than the layers.
Bytes per response token: 2·d (h) + 12 (entropy, surprisal, token id).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..llm.states import FeatureItem
from ..pipeline.files import sha256_file, write_json

FEATURE_SCHEMA_VERSION = 2  # 2: token surprisal beside entropy


class ShardWriter:
    """Appends items and rolls over to a new shard every `shard_tokens` tokens."""

    def __init__(self, root: str | Path, meta: dict, shard_tokens: int = 200_000):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        for old in self.root.glob("shard-*.safetensors"):
            old.unlink()
        self.meta = {**meta, "schema_version": FEATURE_SCHEMA_VERSION}
        self.shard_tokens = shard_tokens
        self.items: dict[str, list] = {}
        self.shards: dict[str, str] = {}
        self._buf: list[tuple[str, FeatureItem]] = []
        self._buf_tokens = 0

    def add(self, prompt_id: str, item: FeatureItem) -> None:
        if prompt_id in self.items or any(pid == prompt_id for pid, _ in self._buf):
            raise ValueError(f"duplicate prompt id {prompt_id!r}")
        if item.surprisal is None or item.surprisal.shape[0] != item.h.shape[0]:
            raise ValueError(f"{prompt_id}: a stored item needs one surprisal per answer token (feature schema "
                             f"{FEATURE_SCHEMA_VERSION})")
        self._buf.append((prompt_id, item))
        self._buf_tokens += item.h.shape[0]
        if self._buf_tokens >= self.shard_tokens:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        name = f"shard-{len(self.shards):05d}.safetensors"
        offset = 0
        for pid, it in self._buf:
            self.items[pid] = [name, offset, int(it.h.shape[0])]
            offset += int(it.h.shape[0])
        tensors = {
            "h": torch.cat([it.h for _, it in self._buf]).contiguous(),
            "entropy": torch.cat([it.entropy.float() for _, it in self._buf]).contiguous(),
            "token_ids": torch.cat([it.token_ids.to(torch.int32) for _, it in self._buf]).contiguous(),
            "surprisal": torch.cat([it.surprisal.float() for _, it in self._buf]).contiguous(),
        }
        path = self.root / name
        save_file(tensors, str(path), metadata={"schema_version": str(FEATURE_SCHEMA_VERSION)})
        self.shards[name] = sha256_file(path)
        self._buf, self._buf_tokens = [], 0

    def close(self) -> Path:
        self._flush()
        index = self.root / "index.json"
        write_json(index, {"meta": self.meta, "shards": self.shards, "items": self.items})
        return index


class FeatureStore:
    """Read side: ``store[prompt_id] -> FeatureItem`` with memory-mapped slices."""

    def __init__(self, root: str | Path, verify: bool = False):
        self.root = Path(root)
        index_path = self.root / "index.json"
        if not index_path.exists():
            raise FileNotFoundError(f"no feature index at {index_path}; run `spanuq extract` first")
        index = json.loads(index_path.read_text())
        self.meta: dict = index["meta"]
        if self.meta.get("schema_version") != FEATURE_SCHEMA_VERSION:
            raise ValueError(f"{index_path}: feature schema {self.meta.get('schema_version')} != {FEATURE_SCHEMA_VERSION}")
        self.shards: dict[str, str] = index["shards"]
        self.items: dict[str, list] = index["items"]
        self._handles: dict[str, object] = {}
        if verify:
            self.verify()

    def verify(self) -> None:
        for name, digest in self.shards.items():
            if sha256_file(self.root / name) != digest:
                raise ValueError(f"checksum mismatch for {self.root / name}: re-run `spanuq extract`")

    @property
    def d_model(self) -> int:
        return int(self.meta["d_model"])

    def __contains__(self, prompt_id: str) -> bool:
        return prompt_id in self.items

    def __len__(self) -> int:
        return len(self.items)

    def _open(self, name: str):
        if name not in self._handles:
            self._handles[name] = safe_open(str(self.root / name), framework="pt")
        return self._handles[name]

    def __getitem__(self, prompt_id: str) -> FeatureItem:
        name, offset, length = self.items[prompt_id]
        f = self._open(name)
        sl = slice(offset, offset + length)
        return FeatureItem(h=f.get_slice("h")[sl], entropy=f.get_slice("entropy")[sl],
                           token_ids=f.get_slice("token_ids")[sl], surprisal=f.get_slice("surprisal")[sl])
