"""What a scoring benchmark starts with: its common options, the config they set, and the probe it scores with.

    from probes import probe_or_random, scoring_setup
    args, cfg = scoring_setup(argparse.ArgumentParser(), n=4, threads=2)  # --model --n --max-new-tokens --threads
    model = probe_or_random(args.model, cfg)

Speed does not depend on the weights, so a random probe of the configured size (saved as a real
checkpoint, for the backbone of ``cfg``) times the same work as a trained one.
"""
from __future__ import annotations

import argparse
import tempfile


def scoring_setup(ap: argparse.ArgumentParser, *, n: int, threads: int, model: str | None = None,
                  max_new_tokens: int = 64):
    """Parse ``ap`` with the options every scoring benchmark takes (--model, --n, --max-new-tokens, --threads)
    besides its own; set torch's threads; return (args, params.yaml's config with the answer budget and the
    llama.cpp server's threads set)."""
    import torch

    from spanuq.config import load_config

    ap.add_argument("--model", default=model,
                    help="probe checkpoint, or shipped" + ("" if model else " (default: a random probe of params.yaml's size)"))
    ap.add_argument("--n", type=int, default=n)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a params.yaml override, e.g. score.context_focus_tokens=0 (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args, load_config("params.yaml", [f"score.max_new_tokens={args.max_new_tokens}",
                                             f"score.server_threads={args.threads}", *args.set])


def probe_or_random(model: str | None, cfg) -> str:
    """``model`` when given, else the folder of a random probe of ``cfg.probe``'s size on SmolLM2's width (576)."""
    if model is not None:
        return model
    from spanuq.model.checkpoint import save_checkpoint
    from spanuq.model.probe import SpanUQProbe

    return str(save_checkpoint(SpanUQProbe(cfg.probe, 576), cfg.probe, 576, tempfile.mkdtemp(),
                               extra={"backbone": cfg.backbone.name}))
