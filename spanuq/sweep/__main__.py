"""``python -m spanuq.sweep sweeps/smollm2-135m.yaml [--storage URL] [-o KEY=VALUE] [--lanes N]``:
the whole sweep on this machine without Prefect; prints the summary (robustness, best trial)."""
import argparse
import json
import logging
import os
import sys

from .runner import run_sweep


def main(argv=None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    ap = argparse.ArgumentParser(prog="python -m spanuq.sweep")
    ap.add_argument("spec")
    ap.add_argument("--storage", default=None, help="Optuna RDB URL (default $SPANUQ_OPTUNA_STORAGE or sqlite:///optuna.db)")
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--lanes", type=int, default=None, help="trials at once (default: the visible GPU slots)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(json.dumps(run_sweep(args.spec, args.storage, args.override, args.lanes), indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
