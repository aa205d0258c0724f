"""``python -m spanuq.report [-p params.yaml] [--preset NAME]``: print the test-split table of the
last run (SpanUQ beside the floors and every baseline) from its metrics files; runs nothing."""
from __future__ import annotations

import argparse
import sys

from ..config import load_config
from ..pipeline.paths import StagePaths
from .stage import read_metrics, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spanuq.report", description=__doc__.split("\n")[0])
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--preset", default=None)
    args = ap.parse_args(argv)
    try:
        print(summary(*read_metrics(StagePaths.from_config(load_config(args.params, preset=args.preset)))))
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
