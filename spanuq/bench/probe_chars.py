"""The probe's spans (`ScoreResult` of the public API) → one score per character.

`SpanUQ.score` returns word-aligned character spans, each with the calibrated û (the
probability that the span is wrong) and its validity p (the probability that the query
found a real span).  A character's score combines the spans that cover it and whose
validity is at least ``v_min``:

* ``u``        max û over the covering spans;
* ``u*p``      max p·û (an uncertain detection counts less);
* ``noisy-or`` 1 − Π (1 − p·û) (independent spans: the chance that any of them is wrong);
* ``u/max``    û / max û over the answer's kept spans: the answer's most doubtful span scores 1,
  the others by how close they come to it (a ranking inside the answer; the task's answers
  were picked to hold an error, so "which part" matters more than "how sure");
* ``const``    1 on every covered character: the probe's spans without û (an ablation row,
  not a setting of the probe's own row).

Characters covered by no such span score 0.  The spans come as the product shows them, trimmed
of the function words at their edges ("in Beijing" -> "Beijing", `spanuq.model.postprocess`).
The combination and ``v_min`` are free settings, chosen on the validation split (`select.py`).
"""
from __future__ import annotations

import numpy as np

MAPPINGS = ("u", "u*p", "noisy-or", "u/max")
V_MIN_GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def probe_chars(result, text_len: int, mapping: str, v_min: float) -> np.ndarray:
    """Per-character score of one `ScoreResult` (``None``: an answer that could not be scored → 0)."""
    v = np.zeros(text_len, dtype=np.float64)
    if result is None:
        return v
    if mapping == "noisy-or":
        keep = np.ones(text_len, dtype=np.float64)
    kept = [s for s in result.spans if s.validity >= v_min]
    top = max((s.u for s in kept), default=0.0)
    for s in kept:
        a, b = s.start, s.end
        if mapping == "u":
            v[a:b] = np.maximum(v[a:b], s.u)
        elif mapping == "u*p":
            v[a:b] = np.maximum(v[a:b], s.u * s.validity)
        elif mapping == "noisy-or":
            keep[a:b] *= 1.0 - s.u * s.validity
        elif mapping == "u/max":
            v[a:b] = np.maximum(v[a:b], s.u / top if top > 0 else 0.0)
        elif mapping == "const":
            v[a:b] = 1.0
        else:
            raise ValueError(f"unknown mapping {mapping!r}; one of {MAPPINGS}")
    return 1.0 - keep if mapping == "noisy-or" else v


def probe_variants(results: list, texts: list[str], extra_v_min: float | None = None,
                   mappings: tuple[str, ...] = MAPPINGS) -> dict[str, list[np.ndarray]]:
    """Every (mapping, v_min) combination's per-character scores, keyed ``"<mapping> v>=<v_min>"``."""
    grid = sorted(set(V_MIN_GRID) | ({round(float(extra_v_min), 4)} if extra_v_min is not None else set()))
    return {f"{m} v>={vm:g}": [probe_chars(r, len(t), m, vm) for r, t in zip(results, texts)]
            for m in mappings for vm in grid}


def variant_v_min(key: str) -> float:
    """The validity cut of a variant key: ``"u/max v>=0.1"`` → 0.1 (a key recorded with the
    former " trimmed" suffix reads the same)."""
    return float(key.split(">=")[1].split()[0])


def u_seq_chars(results: list, text_lens: list[int]) -> list[np.ndarray]:
    """û_seq of the answer on every character (0 for an answer that could not be scored)."""
    return [np.full(n, 0.0 if r is None else float(r.u_seq)) for r, n in zip(results, text_lens)]
