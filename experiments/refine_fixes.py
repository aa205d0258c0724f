"""Does acting on uncertain spans fix answers?  `SpanUQ.refine` on the labelled test split.

    python experiments/refine_fixes.py [--limit 30] [--out data/refine_fixes.jsonl] [--threads 1]

For each factoid test answer with reference answers (the shipped probe's `test_split.jsonl`:
its greedy answers, held out from training; references from the bundled prompts), the
answer slot is judged right / wrong / none (no slot the rule can judge) by the label-truth
check's reference rule (`spanuq.label.offline.answer_slot`), before and after:

  drop            sentences with a span of û > threshold removed (no backbone call)
  regenerate      each uncertain region re-sampled `score.refine_candidates` times, the probe keeps
                  the most certain (G backbone generations for the answer)
  resample+probe  the control at the same cost: G samples of the whole answer, the probe keeps the
                  most certain of them and the original (`region_u` over the whole answer)
  resample        the first of those G samples, no probe (G = 0: the original answer)

All four on the same answers in the same run.  Rows are appended to --out as they finish
(a rerun skips the answers already there); the table is printed from every row of --out.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

METHODS = ("drop", "regenerate", "resample+probe", "resample")


def table(rows: list[dict]) -> str:
    head = ("| method | answers | right before → after | wrong→right | right→wrong | wrong→none | right→none "
            "| none→right | generations |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for m in METHODS:
        moves = Counter((r["before"], r[m]) for r in rows)
        right0 = sum(r["before"] == "correct" for r in rows)
        right1 = sum(r[m] == "correct" for r in rows)
        gens = sum(r["generations"] for r in rows) if m != "drop" else 0
        lines.append(f"| {m} | {len(rows)} | {right0} → {right1} | {moves['wrong', 'correct']} | "
                     f"{moves['correct', 'wrong']} | {moves['wrong', None]} | {moves['correct', None]} | "
                     f"{moves[None, 'correct']} | {gens} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default=None, help="test split JSONL (default: the shipped probe's test_split.jsonl)")
    ap.add_argument("--limit", type=int, default=30, help="factoid answers to refine (in split order)")
    ap.add_argument("--out", default="data/refine_fixes.jsonl")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--threshold", type=float, default=None, help="û threshold (default score.refine_threshold)")
    ap.add_argument("--model", default=None, help="probe (default: SpanUQ.load()'s)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from spanuq import SpanUQ
    from spanuq.config import load_config
    from spanuq.data.prompts import load_bundled
    from spanuq.label.offline import FACTOID_DOMAINS, answer_slot
    from spanuq.label.units import load_spacy
    from spanuq.llm.loading import chat_prompt
    from spanuq.score.refine import region_u
    from spanuq.score.shipped import shipped_dir

    cfg = load_config("params.yaml", [f"score.server_threads={args.threads}"])
    split = Path(args.split) if args.split else shipped_dir(cfg.backbone.name) / "test_split.jsonl"
    prompts = {p.id: p for p in load_bundled()}
    items = [json.loads(line) for line in split.read_text().splitlines() if line.strip()]
    items = [x for x in items if x["domain"] in FACTOID_DOMAINS and prompts.get(x["prompt_id"])
             and prompts[x["prompt_id"]].references][: args.limit]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["prompt_id"] for line in out.read_text().splitlines() if line.strip()} \
        if out.exists() else set()
    nlp = load_spacy(cfg.label.spacy_model)

    def judge(text: str, p) -> str | None:
        return answer_slot(nlp, text, p, cfg.label) if text.strip() else None

    with SpanUQ.load(args.model, cfg=cfg) as uq:
        s = uq.cfg.score
        for n, x in enumerate(items, 1):
            if x["prompt_id"] in done:
                continue
            p, answer, t0 = prompts[x["prompt_id"]], x["response"], time.perf_counter()
            drop = uq.refine(p.text, answer, "drop", args.threshold)
            regen = uq.refine(p.text, answer, "regenerate", args.threshold)
            g = regen.generations
            first, best = answer, answer
            if g:
                chat = chat_prompt(uq.tok, p.text, uq.system_prompt)
                samples = [t for t in uq.sample([chat], g, s.max_new_tokens, seed=cfg.generate.seed + 17)[0]
                           if t.strip()]
                if samples:
                    first = samples[0]
                    scored = uq.score_many([{"prompt": p.text, "response": t} for t in samples], progress=False)
                    cands = [regen.before] + scored
                    best = min(cands, key=lambda r: region_u(r, 0, len(r.answer))).answer
            row = {"prompt_id": x["prompt_id"], "prompt": p.text, "references": p.references,
                   "answer": answer, "before": judge(answer, p),
                   "drop": judge(drop.answer, p), "regenerate": judge(regen.answer, p),
                   "resample+probe": judge(best, p), "resample": judge(first, p), "generations": g,
                   "answers": {"drop": drop.answer, "regenerate": regen.answer, "resample+probe": best,
                               "resample": first},
                   "uncertain_spans": sum(sp.u_before > regen.threshold for sp in regen.spans),
                   "spans": len(regen.spans), "seconds": round(time.perf_counter() - t0, 1)}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{n}/{len(items)}] {x['prompt_id']}: {row['before']} → drop {row['drop']}, regenerate "
                  f"{row['regenerate']}, resample+probe {row['resample+probe']}, resample {row['resample']} "
                  f"({g} generations, {row['seconds']} s)", flush=True)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    print(f"\nthreshold {args.threshold if args.threshold is not None else cfg.score.refine_threshold}, "
          f"{cfg.score.refine_candidates} candidates per region, ≤ {cfg.score.refine_max_regions} regions\n")
    print(table(rows))


if __name__ == "__main__":
    main()
