"""`spanuq refine`: argument parsing and output (spanuq/cli.py wires it in).

    spanuq refine "Who painted the Mona Lisa?"                         # regenerate the uncertain parts
    spanuq refine "…" --response @answer.txt --mode drop --u-threshold 0.7
    spanuq refine "…" --mode flag --json                                # the RefineResult record
"""
from __future__ import annotations

import argparse

from .commands import read_arg, add_model_args, load_uq, use_colour
from .refine import MODES


def add_refine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", help="the prompt")
    p.add_argument("--response", default=None, metavar="TEXT|@FILE", help="refine this answer (default: the "
                                                                           "backbone's own greedy answer)")
    p.add_argument("--mode", choices=MODES, default="regenerate",
                   help="flag: mark the spans above the threshold; drop: remove their sentences; regenerate: "
                        "re-sample each uncertain region and keep the candidate the probe finds most certain")
    p.add_argument("--u-threshold", type=float, default=None,
                   help="act on spans whose û is above this (default: score.refine_threshold, 0.5)")
    p.add_argument("--json", action="store_true", help="print the RefineResult as JSON")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    add_model_args(p)


def refine_view(r, colour_on: bool = True) -> str:
    """The answer before and after (coloured by û) and one line per original span: û before → after."""
    from .views import terminal_view

    lines = [f"mode {r.mode}, acting on spans with û > {r.threshold:.2f}; {r.generations} backbone generations, "
             f"{r.candidates_scored} candidates scored", "", "BEFORE", terminal_view(r.before, colour_on), "", "AFTER"]
    lines.append(terminal_view(r.after, colour_on) if r.after is not None
                 else "(nothing left: every sentence held a span above the threshold)")
    lines += ["", "SPANS  û before → after  action"]
    for s in r.spans:
        after = "—" if s.u_after is None else f"{s.u_after:.2f}"
        new = f" → {s.new_text.strip()!r}" if s.action == "regenerated" else ""
        lines.append(f"  {s.u_before:.2f} → {after:>4}  {s.action:<11} {s.text!r}{new}")
    return "\n".join(lines)


def run_refine(args, cfg) -> int:
    response = read_arg(args.response)
    with load_uq(args, cfg) as uq:
        result = uq.refine(args.prompt, response, mode=args.mode, threshold=args.u_threshold)
    print(result.model_dump_json(indent=2) if args.json else refine_view(result, use_colour(args.color)))
    return 0
