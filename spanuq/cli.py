"""`spanuq` command line: one subcommand per pipeline stage, plus tools.

    spanuq generate                       # reads params.yaml
    spanuq generate -o generate.n_samples=3 --preset cpu-full
    spanuq probe-layers --layers 4,8,12,16,20,24,28
    spanuq ablate --rows paper,default    # params.yaml `ablate.rows`, one table
    spanuq llama-server --port 8080       # the shipped GGUF behind an OpenAI-compatible API
    spanuq score "Who was Marie Curie?"   # the answer with its likely-wrong spans (docs/score.md)
    spanuq refine "Who was Marie Curie?"  # regenerate (or --mode drop|flag) the spans likely wrong
    spanuq serve                          # HTTP API + web page + OpenAI-compatible /v1 on 127.0.0.1:8000
    spanuq serve --upstream http://127.0.0.1:8080/v1   # /v1 answered by that server, scored here
    spanuq calibrate --alpha 0.1          # a conformal threshold on û, stored with the probe
    spanuq recalibrate                    # refit a trained probe's given-answer mapping on its run's dev split
    spanuq monitor answers.jsonl          # a report over many answers (HTML + JSON), resumable
    spanuq registry import-shipped        # the shipped probe as a version of spanuq-<backbone> (MLflow)
    spanuq bench mushroom --split val     # human span labels (Mu-SHROOM), beside the controls

Each subcommand is a parser (`_parser`) and a handler (`HANDLERS`: ``(args, cfg) -> exit code``);
`main` parses, loads the config and runs the handler, turning the errors a user can fix into
one line on stderr (exit code 2).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from .stages import STAGES


def _quiet_env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--params", default="params.yaml", help="params file (default: params.yaml)")
    p.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a param, e.g. -o generate.n_samples=3 (repeatable)")
    p.add_argument("--preset", default=None, help="a preset from params.yaml `presets:` (e.g. cpu-full)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _command(sub, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help)
    _add_config_args(p)
    return p


def _pipeline_commands(sub) -> None:
    for name in STAGES:
        _command(sub, name, f"run the {name} stage")
    _command(sub, "config", "print the resolved config as JSON")
    sp = _command(sub, "probe-layers", "single-layer MLP probes per layer (oracle spans): AUROC per layer")
    sp.add_argument("--layers", default=None, help="comma-separated layer indices (default: every 2nd layer)")
    sp.add_argument("--out", default=None, help="output folder (default: data/<backbone>/layer_probe)")
    sp = _command(sub, "ablate", "train every params.yaml `ablate.rows` switch set on one split: one table")
    sp.add_argument("--rows", default=None, help="comma-separated row names (default: all; with --cv the first two); "
                                                  "with --cv also inline rows, e.g. label.sample_answers=0; rows separated by ';' "
                                                  "when a row sets several keys: 'default;a=1,b=2'")
    sp.add_argument("--cv", type=int, default=None, metavar="K",
                    help="cross-validate the rows on the train split in K folds instead (a dev split too small "
                         "to choose): every training answer scored once (spanuq/train/cv.py)")
    sp.add_argument("--bootstrap", type=int, default=1000, help="with --cv: bootstrap resamples of the intervals")
    sp.add_argument("--out", default=None, help="output folder (default: data/<backbone>/ablation)")
    sp = _command(sub, "registry", "the MLflow model registry: `spanuq registry import-shipped`")
    sp.add_argument("action", choices=["import-shipped"],
                    help="import-shipped: register the probe shipped with spanuq as a version of spanuq-<backbone>")
    sp = _command(sub, "import-real", "fetch the public sets with real sources (spanuq/data/real/catalog.yaml) "
                                      "into real/<set>.jsonl.gz, each file checked against its pinned SHA-256")
    sp.add_argument("sets", nargs="*", help="sets to import (default: every set of the catalog)")
    sp.add_argument("--from", dest="source", default=None, metavar="DIR",
                    help="a local checkout or git directory of the set's repository (one set); default: GitHub")
    sp.add_argument("--out", default=None, metavar="DIR", help="where to write (default: the repository's real/)")
    from .bench.cli import add_bench_args

    add_bench_args(sub.add_parser("bench", help="benchmarks on human labels: `spanuq bench mushroom`"),
                   _add_config_args)


def _product_commands(sub) -> None:
    from .score.commands import add_score_args, add_serve_args
    from .score.refine_command import add_refine_args

    add_score_args(_command(sub, "score", "score an answer: spans likely wrong, with calibrated uncertainty"))
    add_refine_args(_command(sub, "refine", "act on uncertain spans: flag, drop or regenerate them (before/after û)"))
    add_serve_args(_command(sub, "serve", "HTTP service (POST /score, OpenAI-compatible /v1) and web page"))
    from .conformal.command import add_calibrate_args
    from .monitor.command import add_monitor_args

    add_calibrate_args(_command(sub, "calibrate", "fit a threshold on û with a conformal guarantee at level α "
                                                  "(docs/guarantees.md)"))
    add_monitor_args(_command(sub, "monitor", "score a file of answers and report where the doubt is (HTML + "
                                              "JSON, resumable)"))
    sp = _command(sub, "recalibrate", "refit a trained probe's given-answer calibration on its run's dev split "
                                      "(weights untouched)")
    sp.add_argument("--probe", default=None, help="the probe folder (default: the run's data/<backbone>/probe)")
    sp.add_argument("--grounded", nargs="?", const="bundled", default=None, metavar="PAIRS",
                    help="fit only the with-sources calibration of given answers, on grounded training pairs "
                         "(default: the bundled spanuq/label/grounded/pairs.jsonl); every other entry untouched")
    sp.add_argument("--grounded-generated", action="store_true",
                    help="fit only the with-sources calibration of the backbone's own answers, on this run's dev "
                         "answers written with sources (checked on its train split), for a probe trained on another "
                         "run (--probe); every other entry untouched")
    sp.add_argument("--mushroom-val", default=None, metavar="FILE",
                    help="choose which spans of a given answer are shown (its validity threshold) on the English "
                         "Mu-SHROOM validation file, through the product's own output; every other entry untouched")
    sp = _command(sub, "llama-server", "serve the backbone's shipped GGUF (llama.cpp, OpenAI-compatible)")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8080)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="spanuq", description="Span-level uncertainty for LLM answers.")
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="cmd", required=True)
    _product_commands(sub)
    _pipeline_commands(sub)
    return ap


# ------------------------------------------------------------------ handlers: (args, cfg) -> exit code
def _stage(args, cfg) -> int:
    from .stages import run_stage

    print(f"{args.cmd}: wrote {run_stage(args.cmd, cfg, progress=not args.no_progress)}")
    return 0


def _config(args, cfg) -> int:
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return 0


def _probe_layers(args, cfg) -> int:
    from .baselines.layer_probe import run_layer_probe

    layers = [int(x) for x in args.layers.split(",")] if args.layers else None
    run_layer_probe(cfg, layers=layers, out_dir=args.out, progress=not args.no_progress)
    return 0


def _ablate(args, cfg) -> int:
    from .train.cv import row_names

    rows = row_names(args.rows)
    if args.cv:
        from .train.cv import run_cv

        out = run_cv(cfg, args.cv, rows, args.out, args.bootstrap, progress=not args.no_progress)
        print((out / "cv.md").read_text() + f"\nablate --cv: wrote {out / 'cv.json'}")
        return 0
    from .train.ablate import run_ablation

    print(f"ablate: wrote {run_ablation(cfg, progress=not args.no_progress, out_dir=args.out, only=rows)}")
    return 0


def _import_real(args, cfg) -> int:
    from pathlib import Path

    from .data.real import REAL_DIR, RealDataError, import_sets

    try:
        out = import_sets(args.sets or None, Path(args.out) if args.out else REAL_DIR,
                          Path(args.source) if args.source else None)
    except RealDataError as e:
        raise RuntimeError(str(e)) from None
    for path in out:
        print(f"import-real: wrote {path} ({path.with_name(path.name.replace('.jsonl.gz', '.provenance.json')).name})")
    return 0


def _registry(args, cfg) -> int:
    from .score.shipped import import_shipped

    print(json.dumps(import_shipped(cfg), indent=2))
    return 0


def _bench(args, cfg) -> int:
    from .bench.cli import run_bench

    return run_bench(args, cfg)


def _score(args, cfg) -> int:
    from .score.commands import run_score

    return run_score(args, cfg)


def _refine(args, cfg) -> int:
    from .score.refine_command import run_refine

    return run_refine(args, cfg)


def _serve(args, cfg) -> int:
    from .score.commands import run_serve

    return run_serve(args, cfg)


def _calibrate(args, cfg) -> int:
    from .conformal.command import run_calibrate

    return run_calibrate(args, cfg)


def _recalibrate(args, cfg) -> int:
    from .train.recalibrate import run_recalibrate

    return run_recalibrate(args, cfg)


def _monitor(args, cfg) -> int:
    from .monitor.command import run_monitor_command

    return run_monitor_command(args, cfg)


def _llama_server(args, cfg) -> int:
    import time

    from .llm.llamacpp import LlamaCppServer
    from .llm.loading import gguf_path
    from .llm.presets import get_preset

    with LlamaCppServer(gguf_path(get_preset(cfg.backbone.name)), port=args.port, host=args.host) as srv:
        print(f"serving {cfg.backbone.name} at {srv.base_url} (it completed a test chat prompt; "
              f"log: {srv.log_path}; Ctrl-C to stop)", flush=True)
        while srv.alive():
            time.sleep(1)
        srv.raise_if_dead()
    return 0


HANDLERS = {**{name: _stage for name in STAGES}, "config": _config, "probe-layers": _probe_layers,
            "ablate": _ablate, "registry": _registry, "bench": _bench, "score": _score, "refine": _refine,
            "serve": _serve, "llama-server": _llama_server, "calibrate": _calibrate, "monitor": _monitor,
            "recalibrate": _recalibrate, "import-real": _import_real}


def main(argv: list[str] | None = None) -> int:
    _quiet_env()
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        from .config import load_config

        return HANDLERS[args.cmd](args, load_config(args.params, args.override, args.preset))
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, KeyError, RuntimeError) as e:
        if args.verbose:
            raise
        print(f"spanuq {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
