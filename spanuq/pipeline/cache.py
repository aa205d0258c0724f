"""Per-item on-disk cache keyed by a content hash (and `RecentValues`, a small in-memory one).

Long stages (generate, label, judge calls, extract) store each finished item under
``sha256(canonical JSON of everything that determines it)``.  A killed run, or a
changed parameter that touches only some items, redoes only what is missing.
The cache lives outside DVC outputs (DVC deletes a stage's outs before it runs).
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Sequence

from .files import atomic_write_text


def content_hash(obj: Any) -> str:
    """Stable sha256 of a JSON-serialisable object (key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ItemCache:
    """A folder of JSON files, one per item, named by content hash."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        p = self._path(key)
        if p.exists():
            try:
                value = json.loads(p.read_text(encoding="utf-8"))
            except json.JSONDecodeError:  # a torn write from an old crash: recompute
                p.unlink(missing_ok=True)
            else:
                self.hits += 1
                return value
        self.misses += 1
        return None

    def put(self, key: str, value: Any) -> None:
        atomic_write_text(self._path(key), json.dumps(value, ensure_ascii=False))

    def __contains__(self, key: str) -> bool:
        return self._path(key).exists()


class RecentValues:
    """In memory: the values of the last ``size`` distinct keys read.  ``many(keys, compute)`` calls
    ``compute`` once, on the keys it does not hold (each once), and returns a value per key."""

    def __init__(self, size: int):
        self.size = size
        self._held: OrderedDict[Hashable, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def many(self, keys: Sequence[Hashable], compute: Callable[[list], Iterable]) -> list:
        todo = [k for k in dict.fromkeys(keys) if k not in self._held]
        if todo:
            self._held.update(zip(todo, compute(todo)))
        for k in keys:
            self._held.move_to_end(k)
        out = [self._held[k] for k in keys]
        while len(self._held) > self.size:
            self._held.popitem(last=False)
        return out
