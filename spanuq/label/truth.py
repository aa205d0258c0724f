"""The label-truth check: does the teacher's u* tell right answers from wrong ones?

Where a prompt carries reference answers in a factoid domain (TriviaQA / NQ-style
questions: ``offline.FACTOID_DOMAINS``), the correctness of the greedy answer's
*answer slot* is known.  The slot is found by the reference rule of the offline
labeller (`offline.reference_verdicts`):

* **correct** — a named or numeric claim span of the answer matches a reference
  answer (or an alias);
* **wrong** — the answer names no reference anywhere: the answer's own
  candidates (named or numeric spans of its first sentence, not copied from the
  question, of the kind the question asks for — no "British" where a person is
  asked, no "West Africa" where a capital is: `offline.candidate_labels`) are the
  wrong slot.  An answer with no such candidate has no slot.

One span per answer is checked: the first one the rule judges ("Rio de Janeiro" in
"The largest city in Brazil is Rio de Janeiro, also known as the City of the
Sun"), so an answer that repeats its answer counts once.

What is measured: over these slots, the AUROC of u* for "wrong" (the positive
class, as in evaluation: high u* = likely wrong), with a 95% bootstrap interval
over answers, and the u* histogram of each group.

**The reference rule is held out.**  In the training labels the reference rule
sets the slot's u* itself (a wrong slot gets u* = 1; a right one counts every
sample that names any accepted answer), so checking those labels against the
references would only check the rule against itself.  The u* checked here is
the one the labeller computes for the same span *without* the rule: the plain
self-consistency vote over the samples (same claim extraction, alignment,
support rule and abstentions), with the likelihood votes when the teacher counts
them (`likelihood.py`: the backbone's own probability of the span, no reference).
Holding the rule out rather than checking the
spans it does not touch is the only choice: the spans it does not touch are
exactly the ones whose truth is unknown.  Since every other span of every answer
is labelled by that same self-consistency vote, this AUROC says how far the
teacher's u* can be trusted where no reference reaches.

What it cannot show: the slot is one claim per answer (the one a reference
covers), in two domains; background claims of long answers, biographies and
ELI5 answers are never checked against truth.  A reference list that misses an
alias of a right answer makes it count as wrong (docs/bundled-prompts.md).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..pipeline.records import soft_label

HIST_BINS = 10
SLOTS = ("correct", "wrong")


def truth_row(claim_id: str, prompt_id: str, anchor: str, verdict: str, votes: list[float],
              likelihood: float | None = None, weight: float = 0.0) -> dict:
    """One checked slot span: its reference verdict and its u* with the reference rule held out
    (the samples' votes and, when the teacher counts them, the likelihood votes: `records.soft_label`)."""
    u = soft_label(votes, likelihood, weight)
    return {"claim_id": claim_id, "prompt_id": prompt_id, "anchor": anchor,
            "slot": "correct" if verdict == "match" else "wrong", "u": round(float(u), 6), "votes": len(votes)}


def truth_check(rows: list[dict], positive_threshold: float = 0.5, bootstrap: int = 1000, seed: int = 0) -> dict:
    """AUROC of held-out u* for wrong vs correct slot spans, histograms and counts (JSON-safe).

    ``rows``: `truth_row` dicts of every labelled answer whose prompt has references.
    """
    from ..metrics.uq import is_positive, span_metrics

    u = np.array([r["u"] for r in rows], dtype=float)
    wrong = np.array([r["slot"] == "wrong" for r in rows], dtype=float)
    groups = [r["prompt_id"] for r in rows]
    out: dict = {
        "measures": "AUROC of u* (reference rule held out: self-consistency, with the likelihood votes when "
                    "label.likelihood_votes > 0) for wrong vs correct "
                    "answer-slot spans of factoid answers with references",
        "spans": len(rows), "answers": len(set(groups)),
        "correct": int((wrong == 0).sum()), "wrong": int(wrong.sum()),
    }
    if len(rows):
        m = span_metrics(wrong, u, 0.5, bootstrap=bootstrap, seed=seed)
        out["auroc"] = m["auroc"]
    else:
        out["auroc"] = {"value": None, "ci": None, "undefined": "no answer slot with a reference"}
    edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
    for slot, flag in (("correct", 0.0), ("wrong", 1.0)):
        us = u[wrong == flag]
        out[f"u_{slot}"] = {
            "mean": round(float(us.mean()), 4) if len(us) else None,
            "below_threshold": round(float((~is_positive(us, positive_threshold)).mean()), 4) if len(us) else None,
            "histogram": [int(c) for c in np.histogram(us, bins=edges)[0]],
        }
    out["histogram_edges"] = [round(float(e), 2) for e in edges]
    return out


def plot_truth(rows: list[dict], check: dict, out_dir: str | Path, title: str = "") -> Path | None:
    """u* histograms of correct and wrong answer slots (one PNG); None when there is nothing to plot."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=110)
    for slot, colour in (("correct", "#4f81bd"), ("wrong", "#c0504d")):
        us = [r["u"] for r in rows if r["slot"] == slot]
        ax.hist(us, bins=HIST_BINS, range=(0, 1), alpha=0.6, color=colour, edgecolor="white",
                label=f"{slot} ({len(us)})")
    auc = check["auroc"]
    txt = (f"AUROC {auc['value']:.3f}" + (f" [{auc['ci'][0]:.2f}, {auc['ci'][1]:.2f}]" if auc.get("ci") else "")
           if auc.get("value") is not None else f"AUROC undefined: {auc.get('undefined')}")
    ax.set_xlabel("u* with the reference rule held out")
    ax.set_ylabel("answer-slot spans")
    ax.set_title(f"{title + ': ' if title else ''}{txt}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    path = out / "truth.png"
    fig.savefig(path)
    plt.close(fig)
    return path
