"""The ``lookback`` variant of the with-sources calibration: the given-answer mapping plus each attention
head's lookback ratio on the sources, averaged over the span (`spanuq.llm.lookback`):

    û = σ(logit(û_raw)/T + b + w·S − v·H₀ + Σ_k λ_k · LR̄_k)

fitted as one L2-penalised logistic regression on x = (logit û_raw, S, H₀, LR̄_1 … LR̄_K), each input
standardised on the fitting slots (penalty ‖β‖²/2C beside the summed log-loss, the intercept free; as the
given-answer fit, 1/T within `T_BOUNDS` and w, v ≥ 0: the probe's û is never read the wrong way round, nor
a span that surprised the backbone more as more likely right), the penalty C chosen by the lowest log-loss of 5-fold cross-validation
grouped by subject (no subject on both sides of a fold) on those slots, then folded back onto the raw
inputs: with coefficients β_j on standardised inputs (x_j − m_j)/s_j and intercept β_0,

    1/T = β_û/s_û,  w = β_S/s_S,  v = −β_H/s_H,  λ_k = β_k/s_k,  b = β_0 − Σ_j β_j m_j / s_j

The head weights are many (270 for SmolLM2-135M) against a thousand slots, hence the penalty and its
choice on subjects the fold did not see; whether the variant is used at all is decided on the held-out
subjects like every other (`spanuq.train.grounded_calibration`).
"""
from __future__ import annotations

import numpy as np

CS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # the penalties tried (sklearn's C: 1/strength)
FOLDS = 5


def _logit(u: np.ndarray) -> np.ndarray:
    u = np.clip(np.asarray(u, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(u / (1 - u))


def _fit(x: np.ndarray, y: np.ndarray, c: float):
    """(β on the raw inputs, intercept) of the penalised fit (module docstring)."""
    from scipy.optimize import minimize
    from scipy.special import expit

    from ..metrics.ece import T_BOUNDS

    m, s = x.mean(0), x.std(0)
    s = np.where(s > 0, s, 1.0)
    z = (x - m) / s

    def loss(w):
        beta, b0 = w[:-1], w[-1]
        q = z @ beta + b0
        p = expit(q)
        f = np.sum(np.logaddexp(0, q) - y * q) + 0.5 / c * beta @ beta
        g = p - y
        return f, np.r_[z.T @ g + beta / c, g.sum()]

    k = x.shape[1]
    bounds = ([(s[0] / T_BOUNDS[1], s[0] / T_BOUNDS[0]), (0.0, None), (None, 0.0)] + [(None, None)] * (k - 3)
              + [(None, None)])
    w0 = np.zeros(k + 1)
    w0[0] = s[0]
    w = minimize(loss, w0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 5000}).x
    beta = w[:-1] / s
    return beta, float(w[-1] - np.sum(w[:-1] * m / s))


def choose_c(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> tuple[float, dict]:
    """The penalty C of the lowest grouped-CV log-loss (module docstring) and each C's."""
    from sklearn.model_selection import GroupKFold

    folds = min(FOLDS, len(set(groups)))
    if folds < 2:
        raise ValueError("the lookback variant needs slots of at least two subjects to choose its penalty")
    losses = {}
    for c in CS:
        loss = []
        for tr, va in GroupKFold(folds).split(x, y, groups):
            if np.ptp(y[tr]) == 0:
                continue
            beta, b0 = _fit(x[tr], y[tr], c)
            p = np.clip(1 / (1 + np.exp(-(x[va] @ beta + b0))), 1e-6, 1 - 1e-6)
            loss.append(float(-np.mean(y[va] * np.log(p) + (1 - y[va]) * np.log(1 - p))))
        losses[c] = float(np.mean(loss))
    return min(CS, key=losses.get), losses


def fit_platt_lookback(y, u, sh, lookback, groups) -> dict:
    """The mapping's parameters (module docstring): ``y`` u*, ``u`` raw û, ``sh`` (n, 2) of (S, H₀),
    ``lookback`` (n, K) the heads' span-mean lookback ratios, ``groups`` the subject of each slot."""
    y = (np.asarray(y, dtype=np.float64) >= 0.5).astype(int)
    x = np.c_[_logit(u), np.asarray(sh, dtype=np.float64).reshape(-1, 2), np.asarray(lookback, dtype=np.float64)]
    groups = np.asarray(groups)
    c, losses = choose_c(x, y, groups)
    beta, b0 = _fit(x, y, c)
    return {"temperature": float(1 / beta[0]), "bias": b0, "surprisal": float(beta[1]), "context": float(-beta[2]),
            "lookback": [float(v) for v in beta[3:]]}
