"""Write ``spanuq/data/bundled/prompts.jsonl``, the offline prompt set shipped with SpanUQ.

The prompts, fact tables, templates and reference answers live in data files under
``spanuq/data/bundled/sources`` (one table per domain or fact kind, one prompt or fact
per line); :mod:`spanuq.data.bundled_build` turns them into prompts and refuses
ambiguous reference aliases.  See docs/bundled-prompts.md.

    python scripts/make_bundled_prompts.py           # regenerate
    python scripts/make_bundled_prompts.py --check   # exit 1 if the committed file is stale
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spanuq.data.bundled_build import build, write  # noqa: E402
from spanuq.data.prompts import bundled_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = ap.parse_args(argv)
    try:
        prompts = build()
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    out = bundled_path()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write(prompts, Path(tmp) / "prompts.jsonl").read_bytes()
        if not out.exists() or out.read_bytes() != fresh:
            print(f"{out} is stale: run python scripts/make_bundled_prompts.py", file=sys.stderr)
            return 1
        print(f"{out.relative_to(REPO)} is up to date ({len(prompts)} prompts)")
        return 0
    write(prompts, out)
    counts = Counter(p.domain for p in prompts)
    share = {d: f"{c / len(prompts):.3f}" for d, c in counts.items()}
    print(f"wrote {len(prompts)} prompts to {out.relative_to(REPO)}: {dict(counts)} {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
