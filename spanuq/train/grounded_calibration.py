"""The with-sources calibration of given answers (`Calibration.grounded["given"]`), fitted on
grounded training data (`spanuq.train.grounded_slots`: slots of answers read after their sources,
labelled by the source).

Its form is the given-answer mapping's, read after the rendered sources:

    û = σ(logit(û_raw)/T + b + w·S − v·H₀)

with S the slot span's surprisal given the sources (the backbone copies a value the source
states, so the right value is cheap and a value the source contradicts or lacks is not) and H₀
the entropy where the span begins; the ``lookback`` variant adds each attention head's lookback ratio
on the sources over the span (`spanuq.train.grounded_lookback`). Which terms it reads is chosen by measurement on validation:
the training pairs' subjects are split (`VALIDATION_SHARE` of them held out, by a hash of the
subject), each variant of `VARIANTS` is fitted on the rest and the one with the lowest
validation log-loss is refitted on every pair. Beside it, what the variants reach on validation:
pair accuracy by case and the share of right facts at û ≥ 0.5 (`evaluate`).

``flag`` is chosen as the given mapping's (`evaluate.flag_precision`); ``margin`` from the pairs
whose source states the right value; ``fact_spans``: each name, date and number a span of its
own, as the slots were read.
"""
from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np

from .grounded_slots import SlotReading
from ..metrics.ece import expected_calibration_error, fit_platt, fit_platt_surprisal, flag_threshold, pair_margin
from ..model.calibration import Calibration

VALIDATION_SHARE = 1 / 3
VARIANTS = ("platt", "surprisal", "lookback")  # T, b on û alone | T, b, w, v on û, S, H₀ | and λ on the heads' LR


def held_out(group: str, share: float = VALIDATION_SHARE) -> bool:
    """Whether a subject is in the validation part (a stable hash, so every run splits alike)."""
    return zlib.crc32(group.encode()) % 1000 < share * 1000


def arrays(readings: list[SlotReading]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u*, raw û, (S, H₀)) of the covered slots."""
    r = [x for x in readings if x.covered]
    return (np.array([x.label for x in r]), np.array([x.u_raw for x in r]),
            np.array([(x.surprisal, x.entropy) for x in r]).reshape(-1, 2))


def fit(variant: str, readings: list[SlotReading]) -> dict:
    """The mapping's parameters of ``variant`` fitted on ``readings``."""
    y, u, sh = arrays(readings)
    if len(y) < 2 or np.ptp(y) == 0:
        raise ValueError(f"{len(y)} covered slots of one class: too few to fit a with-sources calibration")
    if variant == "platt":
        t, b = fit_platt(y, u)
        return {"temperature": t, "bias": b}
    if variant == "surprisal":
        t, b, w, v = fit_platt_surprisal(y, u, sh)
        return {"temperature": t, "bias": b, "surprisal": w, "context": v}
    if variant == "lookback":
        from .grounded_lookback import fit_platt_lookback

        r = [x for x in readings if x.covered]
        if any(x.lookback is None for x in r):
            raise ValueError("these slot readings carry no lookback ratios (read before they were): read them again")
        return fit_platt_lookback(y, u, sh, np.array([x.lookback for x in r]), np.array([x.group for x in r]))
    raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS}")


def mapping(params: dict) -> Calibration:
    lb = params.get("lookback")
    return Calibration(temperature=params["temperature"], bias=params["bias"],
                       surprisal=params.get("surprisal", 0.0), context=params.get("context", 0.0),
                       lookback=None if lb is None else tuple(lb))


def terms(cal: Calibration, readings: list[SlotReading]) -> np.ndarray | None:
    """What ``cal`` reads of each slot's span: (S, H₀), then the heads' lookback ratios when it reads them."""
    if not cal.reads_surprisal:
        return None
    sh = np.array([(x.surprisal, x.entropy) for x in readings]).reshape(-1, 2)
    return np.c_[sh, np.array([x.lookback for x in readings])] if cal.reads_lookback else sh


def scored(params: dict, readings: list[SlotReading]) -> np.ndarray:
    cal = mapping(params)
    return cal.scores(np.array([x.u_raw for x in readings]), terms(cal, readings))


def evaluate(params: dict, readings: list[SlotReading]) -> dict:
    """`measure` of the mapping ``params`` on ``readings``."""
    return measure(readings, scored(params, readings))


def measure(readings: list[SlotReading], s: np.ndarray) -> dict:
    """Of scores ``s`` of ``readings``: log-loss, Brier score and ECE (10 bins) of covered slots, pair
    accuracy by case (planted above correct, ties 0.5), right facts at û ≥ 0.5 where the source states
    them (a–c; each case apart too) and where it is silent (d), wrong facts at û ≥ 0.5 (a–c)."""
    y = np.array([x.label for x in readings])
    cov = np.array([x.covered for x in readings])
    p = np.clip(s[cov], 1e-6, 1 - 1e-6)
    out = {"slots": int(cov.sum()), "log_loss": float(-np.mean(y[cov] * np.log(p) + (1 - y[cov]) * np.log(1 - p))),
           "brier": float(np.mean((p - y[cov]) ** 2)), "ece": float(expected_calibration_error(y[cov], p))}
    pairs: dict[str, dict[str, float]] = {}
    for x, v in zip(readings, s):
        pairs.setdefault(x.pair, {"case": x.case})[x.twin] = float(v)
    for case in ("a", "b", "c", "d"):
        ps = [q for q in pairs.values() if q["case"] == case and "correct" in q and "planted" in q]
        if ps:
            acc = [1.0 if q["planted"] > q["correct"] + 1e-12 else 0.5 if abs(q["planted"] - q["correct"]) <= 1e-12
                   else 0.0 for q in ps]
            out[f"pair_accuracy_{case}"] = float(np.mean(acc))
    right = [v for x, v in zip(readings, s) if x.twin == "correct" and x.case != "d"]
    silent = [v for x, v in zip(readings, s) if x.twin == "correct" and x.case == "d"]
    wrong = [v for x, v in zip(readings, s) if x.twin == "planted" and x.case != "d"]
    out["right_u_ge_0.5"] = float(np.mean(np.array(right) >= 0.5)) if right else None
    for case in ("a", "b", "c"):
        r = [v for x, v in zip(readings, s) if x.twin == "correct" and x.case == case]
        if r:
            out[f"right_u_ge_0.5_{case}"] = float(np.mean(np.array(r) >= 0.5))
    out["wrong_u_ge_0.5"] = float(np.mean(np.array(wrong) >= 0.5)) if wrong else None
    out["silent_u_ge_0.5"] = float(np.mean(np.array(silent) >= 0.5)) if silent else None
    return out


def calibrate_grounded(readings: list[SlotReading], precision: float, positive: float = 0.5,
                       variants: tuple[str, ...] | list[str] = VARIANTS) -> tuple[dict, dict]:
    """The ``grounded["given"]`` entry (module docstring) and what was measured to choose it, among ``variants``
    (``evaluate.grounded_variants``; ``lookback`` only where the readings carry the heads' ratios)."""
    fit_part = [x for x in readings if not held_out(x.group)]
    val_part = [x for x in readings if held_out(x.group)]
    if not fit_part or not val_part:
        raise ValueError("the grounded training pairs need subjects on both sides of the validation split")
    variants = [v for v in variants if v != "lookback" or all(x.lookback is not None for x in readings)]
    if not variants:
        raise ValueError("no with-sources form to choose from: the lookback variant needs readings with lookback ratios")
    validation = {v: evaluate(fit(v, fit_part), val_part) for v in variants}
    chosen = min(variants, key=lambda v: validation[v]["log_loss"])
    params = fit(chosen, readings)
    y = np.array([x.label for x in readings if x.covered])
    flag, flag_info = flag_threshold(y, scored(params, [x for x in readings if x.covered]), precision, positive)
    s = scored(params, readings)
    pairs: dict[str, dict] = {}
    for x, v in zip(readings, s):
        if x.case != "d" and x.covered:
            pairs.setdefault(x.pair, {})[x.twin] = float(v)
    both = [(q["correct"], q["planted"]) for q in pairs.values() if len(q) == 2]
    entry = {**params, "flag": flag, "fact_spans": True}
    margin_info = None
    if both:
        entry["margin"], margin_info = pair_margin(*zip(*both), confidence=precision)
    info = {"variant": chosen, "validation": validation, "validation_subjects": len({x.group for x in val_part}),
            "fit_subjects": len({x.group for x in fit_part}), "slots": len(readings),
            "covered": int(sum(x.covered for x in readings)), "on_all": evaluate(params, readings),
            "flag_dev": flag_info, "margin_dev": margin_info}
    return entry, info


def with_grounded(calibration: Calibration, entry: dict, source: str = "given") -> Calibration:
    """``calibration`` with its with-sources mapping of ``source`` set to ``entry``, the rest as it was."""
    return replace(calibration, grounded={**(calibration.grounded or {}), source: entry})
