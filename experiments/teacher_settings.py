"""What the teacher's settings do to the labels: truth AUROC and label balance per setting.

Takes the generations of a run made with a generous sampling set-up (many samples, a
long sample budget) and re-labels them offline under smaller set-ups that the same run
contains exactly: the first k samples are what S = k gives (samples are seeded one by
one), and a sample cut to b tokens is what a budget of b gives (finish reason
``length``).  The support rule is a label parameter.  For each setting it prints

* truth AUROC — u* (reference rule held out) of wrong vs correct answer slots
  (`spanuq/label/truth.py`), with its 95% cluster-bootstrap interval;
* below — the share of labelled spans with u* < the positive threshold (negatives);
* tie — spans with u* exactly at the threshold (counted positive);
* tokens — sample tokens the setting spends per prompt.

``--likelihood`` sets ``label.likelihood_votes`` (w: the backbone's probability of a claim
counted as w pseudo-samples, `spanuq/label/likelihood.py`).  The support rule is set by
``--partial`` (``label.partial_support``) and ``--threshold`` (``label.embedding_threshold``:
how close a sample sentence must be to count as the same claim).

    python experiments/teacher_settings.py DATA_DIR [DATA_DIR ...] --samples 3 5 7 --budget 48 128 \\
        --partial 0.5 1.0 --threshold 0.5 0.6

DATA_DIR is a run's ``data`` folder (prompts.jsonl + <backbone>/generations.jsonl).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from spanuq.config import load_config  # noqa: E402
from spanuq.pipeline.files import read_records  # noqa: E402
from spanuq.pipeline.records import Generation, Prompt, Sample  # noqa: E402


def cut(gen: Generation, n_samples: int, budget: int, tok) -> Generation:
    """The generation as S = n_samples with a sample budget of `budget` tokens would have made it."""
    out = []
    for s in gen.samples[:n_samples]:
        if len(s.token_ids) > budget:
            ids = s.token_ids[:budget]
            s = Sample(text=tok.decode(ids, skip_special_tokens=True).strip(), token_ids=ids, finish_reason="length")
        out.append(s)
    return gen.model_copy(update={"samples": out})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="+", type=Path)
    ap.add_argument("--samples", nargs="+", type=int, default=[5])
    ap.add_argument("--budget", nargs="+", type=int, default=[128])
    ap.add_argument("--partial", nargs="+", type=float, default=[1.0])
    ap.add_argument("--threshold", nargs="+", type=float, default=[None],
                    help="label.embedding_threshold values (default: params.yaml's)")
    ap.add_argument("--omission", nargs="+", default=[None], choices=["against", "abstain", None],
                    help="label.omission values (default: params.yaml's)")
    ap.add_argument("--likelihood", nargs="+", type=float, default=[None],
                    help="label.likelihood_votes values (default: params.yaml's)")
    ap.add_argument("--bootstrap", type=int, default=500)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()

    from spanuq.label.align import make_aligner
    from spanuq.label.likelihood import AnchorLikelihood
    from spanuq.label.offline import OfflineLabeller
    from spanuq.label.truth import truth_check
    from spanuq.metrics.uq import is_positive
    from spanuq.llm.loading import load_tokenizer
    from spanuq.pipeline.cache import RecentValues
    import numpy as np

    base = load_config(REPO / "params.yaml")
    tok = load_tokenizer(base)
    aligner = make_aligner(base.label)
    # the settings re-read the same texts: keep every embedding and sentence split (speed only)
    embedder = getattr(aligner, "base", aligner)
    if hasattr(embedder, "recent"):
        embedder.recent.size = 10**7
    sentences = RecentValues(10**7)
    likelihood = AnchorLikelihood(base)  # one pass per greedy answer, kept across settings
    rows = []
    print("| run | S | budget | partial | close ≥ | omission | w | answers | spans | below 0.5 | tie | truth AUROC [95% CI] | correct/wrong | "
          "sample tokens/prompt | truncated |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for data in args.data:
        prompts = {p.id: p for p in read_records(data / "prompts.jsonl", Prompt)}
        gens = read_records(data / base.backbone.name / "generations.jsonl", Generation)
        decoding = gens[0].decoding
        for s, b, partial, thr, om, w in itertools.product(args.samples, args.budget, args.partial, args.threshold,
                                                            args.omission, args.likelihood):
            thr = base.label.embedding_threshold if thr is None else thr
            om = om or base.label.omission
            w = base.label.likelihood_votes if w is None else w
            cfg = base.label.model_copy(update={"partial_support": partial, "embedding_threshold": thr, "omission": om,
                                                "likelihood_votes": w})
            aligner.threshold = embedder.threshold = thr
            lab = OfflineLabeller(cfg, aligner, likelihood=likelihood)
            lab.sentences = sentences
            u, truth, tokens, trunc, nsamp = [], [], 0, 0, 0
            for g in gens:
                gc = cut(g, s, b, tok)
                tokens += sum(len(x.token_ids) for x in gc.samples)
                trunc += sum(x.finish_reason == "length" for x in gc.samples)
                nsamp += len(gc.samples)
                res = lab.label(gc, prompts[g.prompt_id])
                u += [c.u for c in res.claims]
                truth += res.truth
            u = np.array(u)
            tc = truth_check(truth, 0.5, args.bootstrap)
            auc = tc["auroc"]
            row = {"run": f"{data}", "T": decoding.get("temperature"), "S": s, "budget": b, "partial": partial,
                   "threshold": thr, "omission": om, "likelihood_votes": w,
                   "answers": len(gens), "spans": len(u), "below": float((~is_positive(u)).mean()),
                   "tie": int(np.isclose(u, 0.5).sum()), "truth_auroc": auc.get("value"), "truth_ci": auc.get("ci"),
                   "correct": tc["correct"], "wrong": tc["wrong"], "u_correct": tc["u_correct"]["mean"],
                   "u_wrong": tc["u_wrong"]["mean"], "tokens_per_prompt": tokens / len(gens),
                   "truncated": trunc / max(1, nsamp)}
            rows.append(row)
            ci = f" [{auc['ci'][0]:.2f}, {auc['ci'][1]:.2f}]" if auc.get("ci") else ""
            val = f"{auc['value']:.3f}{ci}" if auc.get("value") is not None else "—"
            print(f"| T={row['T']} {data.name} | {s} | {b} | {partial:g} | {thr:g} | {om} | {w:g} | {len(gens)} | {len(u)} | "
                  f"{row['below']:.1%} | {row['tie']} | {val} | {tc['correct']}/{tc['wrong']} | "
                  f"{row['tokens_per_prompt']:.0f} | {row['truncated']:.0%} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
