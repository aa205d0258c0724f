"""Print the evaluation table of a metrics.json: ``python -m spanuq.evaluate.table data/<backbone>/metrics.json``."""
from __future__ import annotations

import sys

from ..io import read_json
from .metrics import format_table

META_KEYS = {"backbone", "split", "n_responses", "n_spans", "probe"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    m = read_json(args[0])
    rows = {k: v for k, v in m.items() if k not in META_KEYS and isinstance(v, dict)}
    print(f"{m.get('backbone')} — {m.get('split')} split: {m.get('n_responses')} responses, {m.get('n_spans')} spans")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
