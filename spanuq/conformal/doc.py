"""The calibration tables of docs/guarantees.md, written by `spanuq calibrate --doc FILE`.

The block between `BEGIN` and `END` in FILE is replaced by what this run measured (the command
that made it, the fitted answers, the held-out table over random splits, the table on another
labelled folder), so the numbers in the docs are always those of the probe that ships with them
and never typed by hand.  Text outside the markers is kept as it is.
"""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from scipy.stats import beta

from ..metrics.conformal import achieved

BEGIN = "<!-- begin: written by `spanuq calibrate --doc`; edit the command, not these lines -->"
END = "<!-- end: written by `spanuq calibrate --doc` -->"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) ``level`` interval of a proportion k / n."""
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def _bound(r: dict) -> str:
    if r["guarantee"] == "factuality":
        return f"P(a kept wrong claim) ≤ {r['bound']:.3f}"
    return f"E[FDP] ≤ {r['alpha']:.2f} w.p. ≥ {1 - r['delta']:.2f}"


def _name(r: dict) -> str:
    return "factuality" if r["guarantee"] == "factuality" else f"fdr (δ = {r['delta']:g})"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _n(x: int) -> str:
    return f"{x:,}"


def command_line() -> str:
    """The command this process was started as, as a user types it."""
    args = sys.argv[1:]
    return "spanuq " + shlex.join(args)


def block(rows: list[dict], fitted_on: dict, other: dict | None, sha256: str) -> str:
    """The markdown between the markers: ``rows`` as `run_calibrate` builds them, ``fitted_on`` and
    ``other`` the counts of the two sets of labelled answers (``n_answers``, ``n_claims``, ``n_wrong``,
    ``n_answers_wrong``, ``source``)."""
    f = fitted_on
    out = [f"`{command_line()}` ({time.strftime('%Y-%m-%d')}, probe weights sha256 {sha256[:12]}).", "",
           f"Fitted on the {f['source']}: **{_n(f['n_answers'])} answers, {_n(f['n_claims'])} labelled claims, "
           f"{_n(f['n_wrong'])} of them wrong** ({_n(f['n_answers_wrong'])} of the {_n(f['n_answers'])} answers have at "
           f"least one wrong claim). The thresholds stored in `conformal.json` are fitted on all "
           f"{_n(f['n_answers'])}:", "",
           "| guarantee | α | guaranteed bound | λ̂ | rate on the fitted answers | claims kept |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        lam = "none (keeps nothing)" if r["threshold"] is None else f"{r['threshold']:.4f}"
        out.append(f"| {_name(r)} | {r['alpha']:.2f} | {_bound(r)} | {lam} | "
                   f"{achieved(r['guarantee'], r['calibration']):.3f} | {_pct(r['calibration']['kept_share'])} |")
    splits = [r for r in rows if "splits" in r]
    if splits:
        s0 = splits[0]["splits"]
        out += ["", f"**Held out.** The answers split at random into {s0['n_cal']} to fit on and {s0['n_test']} to "
                    f"measure on, {_n(s0['n_splits'])} times: the rate the guarantee bounds (factuality: the share of "
                    "held-out answers with a kept wrong claim; fdr: the held-out mean FDP), its mean and 5–95% range "
                    "over the splits, the share of splits whose held-out rate exceeds α, and the share of held-out "
                    "claims kept:", "",
                "| guarantee | α | guaranteed bound | empirical rate, mean [5%, 95%] | splits above α "
                "| claims kept, mean [5%, 95%] |",
                "|---|---|---|---|---|---|"]
        for r in splits:
            s = r["splits"]
            bound = {**r, "bound": s["bound"]}
            out.append(f"| {_name(r)} | {r['alpha']:.2f} | {_bound(bound)} | {s['rate_mean']:.3f} "
                       f"[{s['rate_q05']:.3f}, {s['rate_q95']:.3f}] | {_pct(s['share_splits_above_alpha'])} | "
                       f"{_pct(s['kept_mean'])} [{100 * s['kept_q05']:.1f}, {100 * s['kept_q95']:.1f}] |")
    if other is not None:
        o = other
        out += ["", f"**On {o['source']}**: {_n(o['n_answers'])} answers, {_n(o['n_claims'])} labelled claims, "
                    f"{_n(o['n_wrong'])} of them wrong; the thresholds fitted on all {_n(f['n_answers'])} answers above, "
                    f"measured once (factuality: the count of answers with a kept wrong claim and its 95% "
                    "Clopper–Pearson interval; fdr: the mean FDP; and the pooled share of all kept claims that are "
                    "wrong):", "",
                "| guarantee | α | guaranteed bound | empirical rate | claims kept | kept claims wrong (pooled) |",
                "|---|---|---|---|---|---|"]
        for r in rows:
            res = r["other"]
            if r["guarantee"] == "factuality":
                k = round(res["failure_rate"] * res["n_answers"])
                lo, hi = clopper_pearson(k, res["n_answers"])
                rate = f"{res['failure_rate']:.3f} ({k} / {res['n_answers']}) [{lo:.3f}, {hi:.3f}]"
            else:
                rate = f"mean FDP {res['mean_fdp']:.3f}"
            out.append(f"| {_name(r)} | {r['alpha']:.2f} | {_bound(r)} | {rate} | {_pct(res['kept_share'])} | "
                       f"{res['wrong_share_of_kept']:.3f} |")
    return "\n".join(out) + "\n"


def write_block(path: Path, text: str) -> None:
    """Replace the block between the markers of ``path`` with ``text`` (a clear error without them)."""
    path = Path(path)
    doc = path.read_text(encoding="utf-8")
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        raise ValueError(f"{path}: needs one line\n{BEGIN}\nand after it one line\n{END}\n"
                         "around the place the tables go")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(f"{head}{BEGIN}\n{text}{END}{tail}", encoding="utf-8")
    tmp.replace(path)
