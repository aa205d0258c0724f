"""``python -m spanuq.sweep sweeps/smollm2-135m.yaml [--storage URL] [-o KEY=VALUE] [--lanes N] [--n-trials N]``:
the whole sweep on this machine without Prefect (the pipeline's upstream stages first when
their outputs are missing, unless ``--no-upstream``); prints the robustness table and the summary."""
import argparse
import json
import logging
import os
import sys

from .runner import run_sweep
from .data import DataRefused
from .upstream import UpstreamMissing


def main(argv=None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    ap = argparse.ArgumentParser(prog="python -m spanuq.sweep")
    ap.add_argument("spec")
    ap.add_argument("--storage", default=None, help="Optuna RDB URL (default $SPANUQ_OPTUNA_STORAGE or sqlite:///optuna.db)")
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--lanes", type=int, default=None, help="trials at once (default: the visible GPU slots)")
    ap.add_argument("--n-trials", type=int, default=None, help="run this many configurations (default: the sweep file's)")
    ap.add_argument("--no-upstream", action="store_true",
                    help="refuse (instead of running the pipeline's upstream stages) when the sweep's inputs are missing")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = run_sweep(args.spec, args.storage, args.override, args.lanes, args.n_trials,
                            run_upstream=not args.no_upstream)
    except (UpstreamMissing, DataRefused, ValueError, FileNotFoundError) as e:
        print(f"python -m spanuq.sweep: error: {e}", file=sys.stderr)
        return 2
    print(summary.get("robustness_table", ""))
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
