"""Thresholds on û with a finite-sample guarantee (the math of `spanuq calibrate`).

The units are **answers** (exchangeable: the calibration answers and a new one are drawn from
the same distribution); each answer i has labelled claims j with a score s_ij (its û, as the
evaluation scores a labelled claim: `spanuq.conformal.claims`) and a verdict w_ij (wrong when
u* ≥ the positive threshold).  A threshold λ **keeps** the claims with s_ij ≤ λ and acts on
(flags, drops) the others.

**factuality** (conformal factuality, Mohri & Hashimoto 2024).  Answer i is fully right after
filtering at λ iff λ < r_i := min_{j wrong} s_ij (r_i = +∞ when it has no wrong claim).  With
k = ⌊α(n+1)⌋ and r_(k) the k-th smallest of the n calibration values, λ̂ is the largest float
below r_(k).  A new answer fails iff r_{n+1} ≤ λ̂ < r_(k), i.e. r_{n+1} ranks among the k
smallest of all n+1 values, which by exchangeability has probability ≤ k/(n+1) ≤ α:

    P(every kept claim of a new answer is right) ≥ 1 − k/(n+1) ≥ 1 − α,

marginally over the calibration set and the new answer (ties only help).  k = 0 (α < 1/(n+1))
keeps nothing; r_(k) = +∞ keeps everything.

**fdr** (Learn then Test, Angelopoulos et al. 2021, with Hoeffding–Bentkus p-values).  The
false-discovery proportion of answer i, FDP_i(λ) = #{wrong kept} / max(1, #{kept}) ∈ [0, 1], is
bounded and i.i.d. over answers, so for each λ the null H_λ: E[FDP(λ)] > α has the valid p-value

    p(λ) = min( exp(−n·h(min(μ̂, α), α)),  e·P(Binomial(n, α) ≤ ⌈n μ̂⌉) ),
    h(a, b) = a log(a/b) + (1 − a) log((1 − a)/(1 − b)),   μ̂ = the mean FDP on the calibration set.

λ runs over the calibration scores from the smallest up (fixed-sequence testing: the first
λ's keep few claims and have small FDP) and stops at the first p(λ) > δ; λ̂ is the last λ
rejected.  Fixed-sequence testing controls the family-wise error at δ, so

    P( E[FDP(λ̂)] ≤ α ) ≥ 1 − δ   over the calibration set,

i.e. among the claims kept in an answer the expected share that are wrong is at most α.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

GUARANTEES = ("factuality", "fdr")


@dataclass(frozen=True)
class AnswerClaims:
    """One answer's labelled claims: their scores (û) and whether each is wrong."""

    answer_id: str
    scores: np.ndarray  # (K,) float64
    wrong: np.ndarray  # (K,) bool
    domain: str = ""


@dataclass(frozen=True)
class Fitted:
    """A fitted threshold: keep claims with û ≤ ``threshold`` (None keeps nothing)."""

    guarantee: str
    alpha: float
    delta: float | None
    threshold: float | None
    bound: float  # the guaranteed level: factuality P(a kept wrong claim) ≤ bound; fdr E[FDP] ≤ bound
    n_answers: int


def _r(a: AnswerClaims) -> float:
    """The score of the answer's least doubtful wrong claim (+∞ without one)."""
    return float(a.scores[a.wrong].min()) if a.wrong.any() else math.inf


def fit_factuality(answers: list[AnswerClaims], alpha: float) -> Fitted:
    """λ̂ with P(every kept claim of a new answer is right) ≥ 1 − α (module docstring)."""
    _check(answers, alpha)
    n = len(answers)
    k = math.floor(alpha * (n + 1))
    if k < 1:
        return Fitted("factuality", alpha, None, None, 0.0, n)
    rk = sorted(_r(a) for a in answers)[k - 1]
    threshold = 1.0 if math.isinf(rk) else float(np.nextafter(rk, -math.inf))
    return Fitted("factuality", alpha, None, threshold, k / (n + 1), n)


def hb_pvalue(mean, n: int, alpha: float):
    """Hoeffding–Bentkus p-value of H: E[loss] > α for the mean of n i.i.d. losses in [0, 1]
    (``mean`` a number or an array of them)."""
    m = np.asarray(mean, dtype=np.float64)
    a = np.minimum(m, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(a <= 0, math.log(1.0 / (1.0 - alpha)),
                     a * np.log(np.maximum(a, 1e-300) / alpha) + (1 - a) * np.log((1 - a) / (1 - alpha)))
    hoeffding = np.exp(-n * h)
    bentkus = math.e * binom.cdf(np.ceil(n * m - 1e-9), n, alpha)
    p = np.minimum(1.0, np.minimum(hoeffding, bentkus))
    return float(p) if p.ndim == 0 else p


def _packed(answers: list[AnswerClaims]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All claims at once: (scores, wrong, the index of each claim's answer)."""
    scores = np.concatenate([a.scores for a in answers]) if answers else np.zeros(0)
    wrong = np.concatenate([a.wrong for a in answers]) if answers else np.zeros(0, bool)
    owner = np.repeat(np.arange(len(answers)), [len(a.scores) for a in answers])
    return scores, wrong, owner


def fdp(answers: list[AnswerClaims], threshold: float | None, packed=None) -> np.ndarray:
    """Per answer: the share of its kept claims (û ≤ threshold) that are wrong (0 when none is kept)."""
    if threshold is None:
        return np.zeros(len(answers))
    scores, wrong, owner = packed or _packed(answers)
    kept = scores <= threshold
    n_kept = np.bincount(owner, weights=kept, minlength=len(answers))
    n_bad = np.bincount(owner, weights=kept & wrong, minlength=len(answers))
    return n_bad / np.maximum(1.0, n_kept)


def mean_fdp_curve(answers: list[AnswerClaims], grid: np.ndarray) -> np.ndarray:
    """The mean FDP over ``answers`` at every threshold of ``grid`` (one pass per answer)."""
    total = np.zeros(len(grid))
    for a in answers:
        order = np.argsort(a.scores, kind="stable")
        s, bad = a.scores[order], np.concatenate([[0], np.cumsum(a.wrong[order])])
        kept = np.searchsorted(s, grid, side="right")
        total += bad[kept] / np.maximum(1, kept)
    return total / max(1, len(answers))


def fit_fdr(answers: list[AnswerClaims], alpha: float, delta: float) -> Fitted:
    """λ̂ with P(E[FDP(λ̂)] ≤ α) ≥ 1 − δ by fixed-sequence testing (module docstring)."""
    _check(answers, alpha)
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta}: the risk of a wrong guarantee lies in (0, 1)")
    n = len(answers)
    grid = np.unique(np.concatenate([a.scores for a in answers]))
    fails = np.flatnonzero(hb_pvalue(mean_fdp_curve(answers, grid), n, alpha) > delta)
    stop = int(fails[0]) if len(fails) else len(grid)  # fixed sequence: up to the first λ not rejected
    return Fitted("fdr", alpha, delta, float(grid[stop - 1]) if stop else None, alpha, n)


def fit(answers: list[AnswerClaims], guarantee: str, alpha: float, delta: float = 0.1) -> Fitted:
    if guarantee == "factuality":
        return fit_factuality(answers, alpha)
    if guarantee == "fdr":
        return fit_fdr(answers, alpha, delta)
    raise ValueError(f"unknown guarantee {guarantee!r}; one of {', '.join(GUARANTEES)}")


def outcome(answers: list[AnswerClaims], threshold: float | None) -> dict:
    """What a threshold does on labelled answers: ``failure_rate`` (share of answers with a kept
    wrong claim), ``mean_fdp``, ``wrong_share_of_kept`` (pooled over claims), ``kept_share``."""
    n_claims = sum(len(a.scores) for a in answers)
    kept = [a.scores <= threshold if threshold is not None else np.zeros(len(a.scores), bool) for a in answers]
    n_kept = int(sum(k.sum() for k in kept))
    n_wrong_kept = int(sum((k & a.wrong).sum() for k, a in zip(kept, answers)))
    failed = sum(bool((k & a.wrong).any()) for k, a in zip(kept, answers))
    return {"n_answers": len(answers), "n_claims": n_claims,
            "failure_rate": failed / len(answers) if answers else float("nan"),
            "mean_fdp": float(fdp(answers, threshold).mean()) if answers else float("nan"),
            "wrong_share_of_kept": n_wrong_kept / n_kept if n_kept else 0.0,
            "kept_share": n_kept / n_claims if n_claims else float("nan")}


def achieved(guarantee: str, result: dict) -> float:
    """The rate the guarantee bounds: the failure rate (factuality) or the mean FDP (fdr)."""
    return result["failure_rate"] if guarantee == "factuality" else result["mean_fdp"]


def split_check(answers: list[AnswerClaims], guarantee: str, alpha: float, delta: float = 0.1,
                n_splits: int = 200, cal_fraction: float = 0.5, seed: int = 0) -> dict:
    """Fit on a random ``cal_fraction`` of the answers, measure on the rest, ``n_splits`` times:
    the distribution of the held-out rate the guarantee bounds, and of the share of claims kept."""
    rng = np.random.default_rng(seed)
    n_cal = int(round(cal_fraction * len(answers)))
    if not 0 < n_cal < len(answers):
        raise ValueError(f"{len(answers)} answers cannot be split {cal_fraction:.0%} / {1 - cal_fraction:.0%}")
    rates, kept, bounds = [], [], []
    for _ in range(n_splits):
        order = rng.permutation(len(answers))
        cal = [answers[i] for i in order[:n_cal]]
        test = [answers[i] for i in order[n_cal:]]
        f = fit(cal, guarantee, alpha, delta)
        res = outcome(test, f.threshold)
        rates.append(achieved(guarantee, res))
        kept.append(res["kept_share"])
        bounds.append(f.bound)
    rates, kept = np.array(rates), np.array(kept)
    return {"guarantee": guarantee, "alpha": alpha, "delta": delta if guarantee == "fdr" else None,
            "n_splits": n_splits, "n_cal": n_cal, "n_test": len(answers) - n_cal, "bound": float(np.mean(bounds)),
            "rate_mean": float(rates.mean()), "rate_q05": float(np.quantile(rates, 0.05)),
            "rate_q95": float(np.quantile(rates, 0.95)), "share_splits_above_alpha": float((rates > alpha).mean()),
            "kept_mean": float(kept.mean()), "kept_q05": float(np.quantile(kept, 0.05)),
            "kept_q95": float(np.quantile(kept, 0.95))}


def _check(answers: list[AnswerClaims], alpha: float) -> None:
    if not answers:
        raise ValueError("no labelled answers to calibrate on")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha}: the error level lies in (0, 1)")
