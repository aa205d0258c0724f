"""Do Lookback-Lens features separate right from wrong slots of the grounded training pairs?

    python experiments/lookback_fit.py [/tmp/lookback/readings.npz] [/tmp/lookback/bench.npz]

Reads `experiments/lookback_readings.py`'s output, splits the subjects as the with-sources calibration does
(`spanuq.train.grounded_calibration.held_out`), fits each variant on the fitting subjects' covered slots and
prints, on the held-out third, `grounded_calibration.measure` (log-loss, Brier, ECE, pair accuracy by case,
right facts at û ≥ 0.5 by case, wrong facts at û ≥ 0.5) with counts.  Variants: the shipped `surprisal`
form on (û, S, H₀); L2 logistic regressions (C by 5-fold grouped CV on the fitting subjects) on the 270
per-head lookback ratios alone, with (logit û, S, H₀), and on a few summaries (mean LR of all heads, of the
upper half of the layers) with (logit û, S, H₀).  With a second file (the bench pairs' readings, other
subjects and other wording): the product's variants (`grounded_calibration.fit`) fitted on every training
slot and measured on the bench — never fitted there.
"""
from __future__ import annotations

import sys

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler

from spanuq.metrics.ece import fit_platt_surprisal
from spanuq.train.grounded_calibration import held_out, measure
from spanuq.train.grounded_slots import SlotReading

LAYERS, HEADS = 30, 9
CS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


def logit(u):
    u = np.clip(u, 1e-6, 1 - 1e-6)
    return np.log(u / (1 - u))


def cv_logreg(x, y, groups):
    """StandardScaler + L2 LogisticRegression with C of the lowest grouped-CV log-loss; (model, C)."""
    best = None
    for c in CS:
        loss = []
        for tr, va in GroupKFold(5).split(x, y, groups):
            sc = StandardScaler().fit(x[tr])
            m = LogisticRegression(C=c, max_iter=5000).fit(sc.transform(x[tr]), y[tr])
            p = np.clip(m.predict_proba(sc.transform(x[va]))[:, 1], 1e-6, 1 - 1e-6)
            loss.append(-np.mean(y[va] * np.log(p) + (1 - y[va]) * np.log(1 - p)))
        if best is None or np.mean(loss) < best[0]:
            best = (np.mean(loss), c)
    sc = StandardScaler().fit(x)
    m = LogisticRegression(C=best[1], max_iter=5000).fit(sc.transform(x), y)
    return (lambda z: m.predict_proba(sc.transform(z))[:, 1]), best[1]


KEYS = ("pair", "group", "case", "kind", "twin", "label", "u_raw", "surprisal", "entropy", "covered")


def slot_readings(d) -> list[SlotReading]:
    return [SlotReading(*(x.item() for x in row), tuple(lr)) for *row, lr in zip(*(d[k] for k in KEYS), d["lr"])]


def on_bench(train, bench) -> None:
    from spanuq.train.grounded_calibration import VARIANTS, evaluate, fit

    cols = ("log_loss", "brier", "right_u_ge_0.5_a", "right_u_ge_0.5_b", "right_u_ge_0.5_c", "wrong_u_ge_0.5",
            "silent_u_ge_0.5", "pair_accuracy_c")
    print(f"fitted on all {len({r.group for r in train})} training subjects; the bench: "
          f"{len({r.group for r in bench})} subjects, {len(bench)} slots")
    print("| variant | " + " | ".join(cols) + " |")
    for v in VARIANTS:
        out = evaluate(fit(v, train), bench)
        print(f"| {v} | " + " | ".join(f"{out[k]:.3f}" for k in cols) + " |")


def main() -> None:
    d = np.load(sys.argv[1] if len(sys.argv) > 1 else "/tmp/lookback/readings.npz")
    readings = slot_readings(d)
    if len(sys.argv) > 2:
        on_bench(readings, slot_readings(np.load(sys.argv[2])))
    y = d["label"].astype(int)
    cov = d["covered"].astype(bool)
    val = np.array([held_out(g) for g in d["group"]])
    fit = ~val & cov
    base = np.c_[logit(d["u_raw"]), d["surprisal"], d["entropy"]]
    upper = np.arange(LAYERS * HEADS).reshape(LAYERS, HEADS)[LAYERS // 2:].ravel()
    feats = {}
    for name in ("lr", "lr_prompt"):
        lr = d[name]
        feats[f"{name} (270)"] = lr
        feats[f"(û,S,H₀) + {name} (270)"] = np.c_[base, lr]
        feats[f"(û,S,H₀) + mean {name}, upper mean"] = np.c_[base, lr.mean(1), lr[:, upper].mean(1)]
    vr = [r for r, v in zip(readings, val) if v]
    print(f"fitting: {len({g for g, v in zip(d['group'], val) if not v})} subjects, {fit.sum()} covered slots; "
          f"held out: {len({g for g, v in zip(d['group'], val) if v})} subjects, {len(vr)} slots "
          f"({(val & cov).sum()} covered)")
    for case in "abcd":
        n = sum(1 for r in vr if r.case == case and r.twin == "correct")
        print(f"  held-out pairs of case {case}: {n}")
    rows = {}
    t, b, w, v = fit_platt_surprisal(y[fit], d["u_raw"][fit], base[fit, 1:])
    rows["surprisal (û,S,H₀), shipped form"] = 1 / (1 + np.exp(-(base[:, 0] / t + b + w * base[:, 1] - v * base[:, 2])))
    m, c = cv_logreg(base[fit], y[fit], d["group"][fit])
    rows[f"logreg (û,S,H₀) C={c}"] = m(base)
    for name, x in feats.items():
        m, c = cv_logreg(x[fit], y[fit], d["group"][fit])
        rows[f"logreg {name} C={c}"] = m(x)
    cols = ("log_loss", "brier", "ece", "right_u_ge_0.5_a", "right_u_ge_0.5_b", "right_u_ge_0.5_c", "wrong_u_ge_0.5",
            "silent_u_ge_0.5", "pair_accuracy_a", "pair_accuracy_b", "pair_accuracy_c", "pair_accuracy_d")
    print("| variant | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, s in rows.items():
        out = measure(vr, s[val])
        print(f"| {name} | " + " | ".join(f"{out[k]:.3f}" if out.get(k) is not None else "–" for k in cols) + " |")
    # the single head that separates best on the fitting subjects (AUC of LR for wrong vs right), held out
    for name in ("lr", "lr_prompt"):
        auc = np.array([roc_auc_score(y[fit], d[name][fit, k]) for k in range(LAYERS * HEADS)])
        k = int(np.argmax(np.abs(auc - 0.5)))
        line = f"best head of {name}: layer {k // HEADS} head {k % HEADS}, fitting AUC {auc[k]:.3f}; held out"
        for case in ("abc", "c"):
            sel = val & cov & np.isin(d["case"], list(case))
            line += f" {case}: AUC {roc_auc_score(y[sel], d[name][sel, k]):.3f} (n={sel.sum()})"
        print(line)
    # separation of the raw ratios alone: mean LR of right vs wrong slots by case (held-out and fitting)
    for case in "abc":
        for twin in ("correct", "planted"):
            sel = (d["case"] == case) & (d["twin"] == twin)
            print(f"case {case} {twin}: n={sel.sum()} mean LR {d['lr'][sel].mean():.4f} "
                  f"upper {d['lr'][sel][:, upper].mean():.4f}")


if __name__ == "__main__":
    main()
