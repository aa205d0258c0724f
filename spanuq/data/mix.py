"""Deterministic proportional mixing of prompt pools.

Every selection in the prompts stage (the bundled set, a user's file, the hub
domains, the FELM/TruthfulQA/HaluEval mix, the head/torso/tail biography strata)
goes through the same two steps:

1. **order each pool**: items are sorted by a SHA-1 of ``(seed, item id)``; inside a
   pool, sub-strata (biography popularity, FELM kind, ...) are interleaved in
   proportion to their weights, so any prefix holds easy and hard items alike;
2. **interleave pools** by the Sainte-Laguë (Webster) divisor sequence: the next item
   comes from the pool with the largest ``weight / (2 * taken + 1)``.

Taking the first ``n`` items of the merged sequence then gives the configured
proportions (to within one item for a handful of pools), a run with a smaller ``n``
selects a prefix of a run with a larger one (house-monotone: growing ``n`` never drops
an item), a pool that runs short is simply skipped so the others fill in, and adding
items to a pool never reshuffles the order of the items already there.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def stable_key(seed: int | str, key: str) -> str:
    """A seed-dependent sort key that does not depend on Python, NumPy or list order."""
    return hashlib.sha1(f"{seed}\x1f{key}".encode("utf-8")).hexdigest()


def _ident(item: Any) -> str:
    return getattr(item, "id", None) or (item.get("id") if isinstance(item, Mapping) else None) or repr(item)


def hash_order(items: Sequence[T], seed: int | str, key: Callable[[T], str] = _ident) -> list[T]:
    """``items`` in a pseudo-random order fixed by ``seed`` and each item's id."""
    return sorted(items, key=lambda it: stable_key(seed, key(it)))


def interleave(pools: Mapping[Hashable, Sequence[T]], weights: Mapping[Hashable, float] | None = None,
               limit: int | None = None) -> list[T]:
    """Merge ordered pools into one sequence by Webster's divisor method.

    Pools missing from ``weights`` (or with weight 0) come only after every weighted
    pool is exhausted, in turn.  Ties go to the pool listed first in ``pools``.
    """
    weights = dict(weights) if weights is not None else {k: 1.0 for k in pools}
    names = list(pools)
    taken = {k: 0 for k in names}
    total = sum(len(v) for v in pools.values())
    if limit is not None:
        total = min(total, limit)
    out: list[T] = []
    for _ in range(total):
        best, best_pri = None, None
        for i, k in enumerate(names):
            if taken[k] >= len(pools[k]):
                continue
            w = float(weights.get(k, 0.0))
            pri = (1, w / (2 * taken[k] + 1), 0, -i) if w > 0 else (0, 0.0, -taken[k], -i)
            if best_pri is None or pri > best_pri:
                best, best_pri = k, pri
        out.append(pools[best][taken[best]])
        taken[best] += 1
    return out


def stratified_order(items: Sequence[T], seed: int | str, stratum: Callable[[T], Hashable],
                     weights: Mapping[Hashable, float] | None = None, key: Callable[[T], str] = _ident) -> list[T]:
    """Hash-order each stratum of ``items`` and interleave the strata.

    ``weights`` default to the strata sizes, so every prefix mirrors the whole pool.
    Strata listed in ``weights`` come first (in that order), then the rest sorted by name.
    """
    groups: dict[Hashable, list[T]] = {}
    for it in items:
        groups.setdefault(stratum(it), []).append(it)
    if weights is None:
        weights = {k: float(len(v)) for k, v in groups.items()}
    names = [k for k in weights if k in groups] + sorted((k for k in groups if k not in weights), key=str)
    pools = {k: hash_order(groups[k], seed, key) for k in names}
    return interleave(pools, weights)


def mix(pools: Mapping[Hashable, Sequence[T]], weights: Mapping[Hashable, float], n: int | None) -> list[T]:
    """The first ``n`` items (None: all) of the interleaved pools, each pool already ordered."""
    ordered = {k: pools[k] for k in weights if k in pools}
    ordered.update({k: v for k, v in pools.items() if k not in ordered})
    return interleave(ordered, weights, limit=n)


def counts(items: Sequence[T], key: Callable[[T], Hashable]) -> dict[Hashable, int]:
    out: dict[Hashable, int] = {}
    for it in items:
        k = key(it)
        out[k] = out.get(k, 0) + 1
    return out
