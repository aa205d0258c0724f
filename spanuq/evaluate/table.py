"""Print the evaluation table of a metrics.json.

    python -m spanuq.evaluate.table [data/<backbone>/metrics.json]   # default: the backbone in params.yaml
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..io import read_json
from .metrics import format_table

META_KEYS = {"backbone", "split", "n_responses", "n_spans", "probe"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    if args:
        path = Path(args[0])
    else:
        from ..config import load_config
        from ..paths import StagePaths

        path = StagePaths.from_config(load_config()).metrics
    if not path.exists():
        print(f"no metrics yet at {path}: run `dvc repro`", file=sys.stderr)
        return 1
    m = read_json(path)
    rows = {k: v for k, v in m.items() if k not in META_KEYS and isinstance(v, dict)}
    print(f"{m.get('backbone')}, {m.get('split')} split: {m.get('n_responses')} responses, {m.get('n_spans')} spans")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
