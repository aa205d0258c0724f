"""Stratified, deterministic train/dev/test assignment.

One function, :func:`assign_splits`, used twice in the pipeline: the prompts stage
gives each prompt a provisional split stratified by domain, and the label stage
re-stratifies by domain x uncertainty bin once labels exist (paper App. D).

What it guarantees:

* **Global sizes are exact.** With ``{"train": 17494, "dev": 500, "test": 2000}`` and
  19,994 items the splits hold exactly those counts; fractions are turned into counts
  by largest remainder (sizes that do not add up to the number of items are rescaled
  the same way, with a warning).
* **Every stratum is split in proportion, within one item.** For a stratum of ``n_k``
  items and split fraction ``f_s`` the stratum sends ``floor`` or ``ceil`` of
  ``n_k * f_s`` items to split ``s`` (at most one item away from the exact share), so
  every stratum with enough members is spread over every split.  The per-stratum
  counts are a controlled rounding of the ``n_k * f_s`` table: row sums (stratum
  sizes) and column sums (split sizes) are both met exactly.
* **Tiny strata are safe.** Strata with fewer than two members are pooled into one
  stratum (``min_stratum``) before allocation, so 20,000 singleton keys cost nothing
  and a lone item simply goes where the global quota still has room.
* **Deterministic and stable.** Inside a stratum, items are ordered by a SHA-1 of
  ``(seed, stratum, item id)``: no global RNG, no dependence on library versions, and
  adding items to a stratum does not reshuffle the others.

``sklearn.model_selection.train_test_split(stratify=...)`` is not used: it refuses
strata with a single member and only guarantees proportions up to rounding per call,
not exact global sizes together with per-stratum shares.
"""
from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

SPLITS: tuple[str, ...] = ("train", "dev", "test")
POOLED = "__pooled_small_strata__"


def _hash(*parts: object) -> str:
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def _item_id(item: Any, index: int) -> str:
    """A stable identity for ordering: ``item.id``, ``item["id"]`` (or ``prompt_id``), else the index."""
    for attr in ("id", "prompt_id"):
        v = getattr(item, attr, None)
        if isinstance(v, str):
            return v
        if isinstance(item, Mapping) and isinstance(item.get(attr), str):
            return item[attr]
    return f"#{index}"


def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Integer counts summing to ``total``, proportional to ``weights`` (Hamilton's method).

    Ties in the remainders go to the key listed first, so the result is deterministic.
    """
    keys = list(weights)
    wsum = float(sum(weights.values()))
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if not keys or wsum <= 0:
        raise ValueError(f"weights must be positive and non-empty, got {dict(weights)}")
    if any(w < 0 for w in weights.values()):
        raise ValueError(f"weights must be >= 0, got {dict(weights)}")
    exact = {k: total * weights[k] / wsum for k in keys}
    counts = {k: math.floor(exact[k] + 1e-9) for k in keys}
    left = total - sum(counts.values())
    order = sorted(keys, key=lambda k: (-(exact[k] - counts[k]), keys.index(k)))
    for k in order[:left]:
        counts[k] += 1
    return counts


def split_targets(n: int, sizes_or_fractions: Mapping[str, float | int]) -> dict[str, int]:
    """Global split sizes for ``n`` items from sizes (ints) or fractions (floats)."""
    if not sizes_or_fractions:
        raise ValueError("no splits given: pass e.g. {'train': 0.6, 'dev': 0.15, 'test': 0.25}")
    bad = [k for k in sizes_or_fractions if k not in SPLITS]
    if bad:
        raise ValueError(f"unknown split name(s) {bad}; splits are {list(SPLITS)}")
    vals = list(sizes_or_fractions.values())
    if any(v < 0 for v in vals):
        raise ValueError(f"split sizes/fractions must be >= 0, got {dict(sizes_or_fractions)}")
    if sum(vals) <= 0:
        raise ValueError(f"split sizes/fractions must not all be 0, got {dict(sizes_or_fractions)}")
    is_sizes = all(isinstance(v, int) and not isinstance(v, bool) for v in vals) and sum(vals) > 1
    if is_sizes and sum(vals) == n:
        return {k: int(v) for k, v in sizes_or_fractions.items()}
    if is_sizes:
        log.warning("split sizes %s add up to %d, not to the %d items: rescaled proportionally",
                    dict(sizes_or_fractions), sum(vals), n)
    return largest_remainder(n, {k: float(v) for k, v in sizes_or_fractions.items()})


def _controlled_rounding(rows: dict[Hashable, int], fractions: dict[str, float], col_totals: dict[str, int],
                         row_order: list[Hashable]) -> dict[Hashable, dict[str, int]]:
    """Integer table with exact row sums ``rows`` and column sums ``col_totals`` whose cells
    are ``floor`` or ``ceil`` of ``rows[k] * fractions[s]``.

    Floors first; the leftover units (fewer than the number of splits per row) are a 0/1
    matrix with given margins, found greedily and completed by augmenting paths over the
    (few) columns: a unit moves from column ``a`` to column ``b`` inside some row, which
    keeps every row sum, until a column with room is reached.
    """
    cols = list(fractions)
    base = {k: {s: math.floor(rows[k] * fractions[s] + 1e-9) for s in cols} for k in rows}
    frac = {k: {s: rows[k] * fractions[s] - base[k][s] for s in cols} for k in rows}
    need_row = {k: rows[k] - sum(base[k].values()) for k in rows}
    room = {s: col_totals[s] - sum(base[k][s] for k in rows) for s in cols}
    if any(v < 0 for v in room.values()):  # cannot happen with targets from largest_remainder
        raise ValueError(f"split targets {col_totals} are too small for the strata {rows}")
    extra = {k: {s: 0 for s in cols} for k in rows}

    def allowed(k: Hashable, s: str, strict: bool) -> bool:
        # strict: only cells with a fractional part (cell stays within floor/ceil);
        # relaxed: any cell whose exact share is > 0 may take one more (still < share + 1).
        return frac[k][s] > 1e-9 if strict else fractions[s] > 0

    # greedy pass: each row's leftover units to the allowed columns with most room
    for k in row_order:
        for _ in range(need_row[k]):
            cands = [s for s in cols if not extra[k][s] and room[s] > 0 and allowed(k, s, True)]
            if not cands:
                break
            s = max(cands, key=lambda c: (room[c], frac[k][c], -cols.index(c)))
            extra[k][s] = 1
            room[s] -= 1
            need_row[k] -= 1

    def augment(k: Hashable, strict: bool) -> bool:
        """Give row k one more unit, re-routing units of other rows if needed (BFS over columns)."""
        starts = [s for s in cols if not extra[k][s] and allowed(k, s, strict)]
        for s0 in starts:
            prev: dict[str, tuple[str, Hashable] | None] = {s0: None}
            queue = [s0]
            found = None
            while queue:
                a = queue.pop(0)
                if room[a] > 0:
                    found = a
                    break
                for b in cols:
                    if b in prev:
                        continue
                    for k2 in row_order:  # a row holding a unit in a that could hold it in b instead
                        if k2 != k and extra[k2][a] and not extra[k2][b] and allowed(k2, b, strict):
                            prev[b] = (a, k2)
                            queue.append(b)
                            break
            if found is None:
                continue
            path = []
            node = found
            while prev[node] is not None:
                a, k2 = prev[node]
                path.append((a, node, k2))
                node = a
            for a, b, k2 in reversed(path):
                extra[k2][a], extra[k2][b] = 0, 1
            extra[k][s0] = 1
            room[found] -= 1
            return True
        return False

    for strict in (True, False):
        for k in row_order:
            while need_row[k] > 0 and augment(k, strict):
                need_row[k] -= 1
    # last resort (not reached for consistent inputs): any column with room
    for k in row_order:
        while need_row[k] > 0:
            s = max(cols, key=lambda c: (room[c], -cols.index(c)))
            base[k][s] += 1
            room[s] -= 1
            need_row[k] -= 1
    return {k: {s: base[k][s] + extra[k][s] for s in cols} for k in rows}


def assign_splits(
    items: Sequence[Any],
    strata_keys: Sequence[Hashable] | Callable[[Any], Hashable] | Mapping[str, float | int] | None = None,
    sizes_or_fractions: Mapping[str, float | int] | int | None = None,
    seed: int = 0,
    *,
    min_stratum: int = 2,
) -> list[str]:
    """One split name per item, stratified by ``strata_keys`` (module docstring).

    ``items``: anything with an ``id`` (prompts, records, dicts) or plain values;
    ``strata_keys``: one hashable key per item, or a function item -> key (None: one stratum);
    ``sizes_or_fractions``: ``{"train": 17494, "dev": 500, "test": 2000}`` or
    ``{"train": 0.6, "dev": 0.15, "test": 0.25}``; ``seed``: changes the draw, nothing else.

    The short form ``assign_splits(keys, sizes_or_fractions, seed)`` also works: when the
    second argument is the split mapping, the first one holds the strata keys themselves.

        >>> assign_splits(["a", "a", "b", "b"], {"train": 0.5, "test": 0.5}, 0)
        ['test', 'train', 'train', 'test']
    """
    if isinstance(strata_keys, Mapping):  # short form: (keys, target, seed)
        if sizes_or_fractions is not None and not isinstance(sizes_or_fractions, bool):
            seed = int(sizes_or_fractions)  # type: ignore[arg-type]
        strata_keys, sizes_or_fractions = list(items), strata_keys
    if sizes_or_fractions is None or not isinstance(sizes_or_fractions, Mapping):
        raise ValueError("assign_splits needs the split sizes or fractions, e.g. {'train': 0.8, 'test': 0.2}")
    items = list(items)
    n = len(items)
    if strata_keys is None:
        keys: list[Hashable] = [""] * n
    elif callable(strata_keys):
        keys = [strata_keys(it) for it in items]
    else:
        keys = list(strata_keys)
        if len(keys) != n:
            raise ValueError(f"{len(keys)} strata keys for {n} items")
    if n == 0:
        return []
    totals = split_targets(n, sizes_or_fractions)
    fractions = {s: totals[s] / n for s in totals}

    members: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    # pool strata too small to split into one stratum
    small = [k for k, idx in members.items() if len(idx) < min_stratum]
    if len(small) > 1:
        members[POOLED] = sorted(i for k in small for i in members.pop(k))
    sizes = {k: len(v) for k, v in members.items()}
    row_order = sorted(members, key=lambda k: _hash(seed, "stratum-order", repr(k)))
    table = _controlled_rounding(sizes, fractions, totals, row_order)

    out: list[str] = [""] * n
    split_names = list(totals)
    for k, idx in members.items():
        ordered = sorted(idx, key=lambda i: (_hash(seed, repr(k), _item_id(items[i], i)), i))
        pos = 0
        for s in split_names:
            for i in ordered[pos:pos + table[k][s]]:
                out[i] = s
            pos += table[k][s]
    return out


def split_counts(splits: Sequence[str], strata_keys: Sequence[Hashable] | None = None) -> dict:
    """``{split: n}`` or, with keys, ``{key: {split: n}}`` (for reports and tests)."""
    if strata_keys is None:
        out: dict = {}
        for s in splits:
            out[s] = out.get(s, 0) + 1
        return out
    table: dict = {}
    for k, s in zip(strata_keys, splits):
        row = table.setdefault(k, {})
        row[s] = row.get(s, 0) + 1
    return table
