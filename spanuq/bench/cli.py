"""`spanuq bench mushroom`: arguments and output (spanuq/cli.py wires it in).

    spanuq bench mushroom --split val --data ~/mu-shroom          # parse + cache the English files; choose settings
    spanuq bench mushroom --split test --probe data/smollm2-135m/probe   # once per probe (--force to re-read)
    spanuq bench mushroom-prompts --data mushroom.en-train_nolabel.v1.jsonl --out train.jsonl --fold 0/2
    spanuq bench planted --probe shipped                          # a planted wrong fact vs the right one
    spanuq bench grounded --probe shipped                         # a fact the sources contradict vs the one they state
    spanuq bench real --probe shipped                             # real passages with people's marks (WiCE, XQuAD)
"""
from __future__ import annotations

import argparse
import json


def add_bench_args(p: argparse.ArgumentParser, add_config_args) -> None:
    sub = p.add_subparsers(dest="bench", required=True)
    m = sub.add_parser("mushroom", help="English Mu-SHROOM (SemEval-2025 Task 3): IoU and Cor on human span labels")
    add_config_args(m)
    m.add_argument("--split", choices=["val", "test"], default="val",
                   help="val chooses every free setting; test reads them (once per probe)")
    m.add_argument("--probe", default=None, metavar="DIR|URI",
                   help="probe checkpoint folder or MLflow URI; default: data/<backbone>/probe")
    m.add_argument("--data", nargs="+", default=None, metavar="PATH",
                   help="the English Mu-SHROOM files or a folder holding them (parsed once, then cached)")
    m.add_argument("--force", action="store_true", help="read the test split again for a probe already tested")
    m.add_argument("--seed", type=int, default=0, help="seed of the random control and the bootstrap")
    m.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals (0: none)")
    m.add_argument("--exclude-questions", default=None, metavar="PROMPTS",
                   help="leave out answers whose question is in this prompt file (the probe trained on it)")
    t = sub.add_parser("mushroom-prompts", help="the unlabelled English train split as a prompt file of given "
                       "answers (label them with the pipeline's teacher, train on them)")
    add_config_args(t)
    t.add_argument("--data", required=True, metavar="FILE", help="mushroom.en-train_nolabel.v1.jsonl")
    t.add_argument("--out", required=True, metavar="FILE", help="the prompt file to write (.jsonl)")
    t.add_argument("--fold", default=None, metavar="K/N", help="only the answers to the questions of fold K of N")


    pl = sub.add_parser("planted", help="pairs of answers that differ in one fact: is the planted wrong value "
                        "scored above the right one? (beside the backbone's surprisal, a tagger and û_seq)")
    add_pair_bench_args(pl, add_config_args)
    pl.add_argument("--facts", default=None, metavar="FILE",
                    help="prompts with references (the prompts stage's format; meta.kind, meta.wrong optional); "
                         "default: the bundled spanuq/bench/planted/facts.jsonl")
    pl.add_argument("--pasted", default=None, metavar="FILE", help="multi-sentence answers with plants "
                    "({id, domain, prompt, answer, plants: [{slot, kind, wrong}]}); default: the bundled pasted.jsonl")
    pl.add_argument("--sources", default="templated,own,pasted",
                    help="comma-separated: templated (short templated answers), own (the backbone's answer, its "
                         "slot swapped), pasted (multi-sentence answers)")
    pl.add_argument("--name", default="planted", help="output stem: data/<backbone>/bench/<name>.{json,md}")
    pl.add_argument("--limit", type=int, default=None, help="only the first N facts and pasted pairs (a quick look)")
    pl.add_argument("--refine", action="store_true", help="also refine every twin and the backbone's own answers "
                    "(regenerate) and count right → wrong against wrong → right (slow: minutes per 100 answers)")


    gr = sub.add_parser("grounded", help="pairs of answers that differ in one fact, read against sources: is the "
                        "fact the sources contradict or do not state scored above the one they state? (beside string "
                        "overlap, the backbone's surprisal given the sources, a tagger)")
    add_pair_bench_args(gr, add_config_args)
    gr.add_argument("--facts", default=None, metavar="FILE",
                    help="your own pairs ({id, group, kind, case, prompt, context: [passage], answer, slot: [start, "
                         "end], wrong} per line); default: the bundled spanuq/bench/grounded/pairs.jsonl")
    gr.add_argument("--readings", default=None, help="comma-separated: context (the product's `context` input), "
                    "pasted (the sources pasted above the question); default: both where the scorer takes context")
    gr.add_argument("--name", default="grounded", help="output stem: data/<backbone>/bench/<name>.{json,md}")
    gr.add_argument("--limit", type=int, default=None, help="only the pairs of the first N subjects (a quick look)")

    rl = sub.add_parser("real", help="real passages with people's marks, through the product: WiCE test claims (word "
                        "AUROC, IoU, Cor), same-passage swaps from XQuAD's test articles (pair accuracy, right facts at "
                        "the red line), the backbone's own answers with their paragraph (AUROC, ECE); beside the words "
                        "absent from the sources, the surprisal given them, a tagger, the whole answer")
    add_pair_bench_args(rl, add_config_args)
    rl.add_argument("--parts", default="marked,swaps,own,passages", help="comma-separated: marked, swaps, own, passages")
    rl.add_argument("--data", default=None, metavar="FILE",
                    help="your own marked items for the marked part, one JSON object a line: {id, article, question, "
                         "sources: [{id, text, title?}], answer, marks: [[start, end], ...]}; default: WiCE test")
    rl.add_argument("--name", default="real", help="output stem: data/<backbone>/bench/<name>.{json,md}")
    rl.add_argument("--limit", type=int, default=None, help="only the first N claims and questions (a quick look)")


def add_pair_bench_args(p: argparse.ArgumentParser, add_config_args) -> None:
    """What every pair bench takes: the config, the probe, the bootstrap."""
    add_config_args(p)
    p.add_argument("--probe", default=None, metavar="DIR|URI|shipped",
                   help="probe checkpoint folder, MLflow URI or `shipped`; default: as `spanuq score`")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals (0: none)")


def run_bench(args, cfg) -> int:
    if args.bench == "real":
        from .real_run import markdown, run_real

        out = run_real(cfg, probe=args.probe, parts=tuple(p for p in args.parts.split(",") if p), data=args.data,
                       name=args.name, bootstrap=args.bootstrap, seed=args.seed, progress=not args.no_progress,
                       limit=args.limit)
        print(markdown(json.loads(out.read_text())), end="")
        print(f"bench real: wrote {out} and {out.with_suffix('.md')}")
        return 0
    if args.bench == "grounded":
        from .grounded_run import markdown, run_grounded

        readings = tuple(r for r in args.readings.split(",") if r) if args.readings else None
        out = run_grounded(cfg, probe=args.probe, facts=args.facts, name=args.name, bootstrap=args.bootstrap,
                           seed=args.seed, progress=not args.no_progress, limit=args.limit, readings=readings)
        print(markdown(json.loads(out.read_text())), end="")
        print(f"bench grounded: wrote {out} and {out.with_suffix('.md')}")
        return 0
    if args.bench == "planted":
        from .planted_run import markdown, run_planted

        out = run_planted(cfg, probe=args.probe, facts=args.facts, pasted=args.pasted,
                          sources=tuple(s for s in args.sources.split(",") if s), name=args.name,
                          bootstrap=args.bootstrap, seed=args.seed, progress=not args.no_progress, limit=args.limit,
                          refine=args.refine)
        print(markdown(json.loads(out.read_text())), end="")
        print(f"bench planted: wrote {out} and {out.with_suffix('.md')}")
        return 0
    if args.bench == "mushroom-prompts":
        from ..pipeline.files import write_jsonl
        from .mushroom_train import parse_fold, question_key, unlabelled_prompts

        rows = unlabelled_prompts(args.data, parse_fold(args.fold))
        write_jsonl(args.out, rows)
        print(f"bench mushroom-prompts: {len(rows)} answers to {len({question_key(r['text']) for r in rows})} questions -> {args.out}")
        return 0
    from transformers.utils import logging as hf_logging

    from ..report.mushroom import mushroom_table
    from .run import run_mushroom

    hf_logging.disable_progress_bar()
    out = run_mushroom(cfg, args.split, probe=args.probe, data=args.data, force=args.force, seed=args.seed,
                       bootstrap=args.bootstrap, progress=not args.no_progress, exclude_questions=args.exclude_questions)
    record = json.loads(out.read_text())
    t = mushroom_table(record)
    width = max(len(r[0]) for r in t.rows)
    print(t.title)
    for r in t.rows:
        print(f"  {r[0]:<{width}}  IoU {r[1]:<22} Cor {r[2]}")
    print(f"bench mushroom: wrote {out} and {out.with_suffix('.md')}")
    return 0
