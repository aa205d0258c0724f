"""Public data with real sources and people's marks: `spanuq import-real` and the records it writes.

    spanuq import-real                          # every set of catalog.yaml, downloaded from GitHub at its commit
    spanuq import-real wice --from ~/src/wice   # one set, from a local checkout or git directory

    from spanuq.data.real import load_items
    test = load_items("wice", split="test")     # [RealItem, ...]

`catalog.yaml` pins each set's repository, commit, files (SHA-256) and license; `fetch.fetch_file` gets and
checks the bytes; `sets.READERS` turns them into `RealItem`s; `import_sets` writes ``real/<set>.jsonl.gz``
(gzip without a timestamp, so the same input gives the same bytes) with ``real/<set>.provenance.json``.
The written files are committed and tracked by the (frozen) DVC stage ``import_real``, so a clone has them
offline.
"""
from __future__ import annotations

import gzip
import io
import json
from functools import lru_cache
from pathlib import Path

import yaml

from .fetch import RealDataError, fetch_file
from .records import LABELS, SPLITS, RealItem
from .sets import READERS

CATALOG = Path(__file__).with_name("catalog.yaml")
REAL_DIR = Path(__file__).resolve().parents[3] / "real"  # the repository's real/ (a checkout's)

__all__ = ["RealDataError", "RealItem", "LABELS", "SPLITS", "catalog", "import_sets", "load_items", "REAL_DIR"]


@lru_cache(maxsize=1)
def catalog() -> dict:
    return yaml.safe_load(CATALOG.read_text(encoding="utf-8"))


def _gzip_jsonl(rows: list[dict]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as f:
        for r in rows:
            f.write((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    return buf.getvalue()


def import_set(name: str, out_dir: Path = REAL_DIR, source: Path | None = None) -> Path:
    """Fetch set ``name``'s pinned files (GitHub, or the local copy ``source``), check them, normalise them and
    write ``out_dir/<name>.jsonl.gz`` and its provenance; returns the records' path."""
    cat = catalog()
    if name not in cat["sets"]:
        raise RealDataError(f"no set {name!r} in {CATALOG.name} (sets: {', '.join(cat['sets'])})")
    spec = cat["sets"][name]
    files = {path: fetch_file(spec["repository"], spec["commit"], path, sha, source)
             for path, sha in spec["files"].items()}
    items = READERS[name](files, cat["split_shares"])
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}.jsonl.gz"
    out.write_bytes(_gzip_jsonl([it.to_json() for it in items]))
    counts = {s: sum(it.split == s for it in items) for s in SPLITS}
    articles = {s: len({it.article for it in items if it.split == s}) for s in SPLITS}
    (out_dir / f"{name}.provenance.json").write_text(json.dumps({
        "set": name, "title": spec["title"], "repository": spec["repository"], "commit": spec["commit"],
        "license": spec["license"], "files": spec["files"], "items": counts, "articles": articles}, indent=1) + "\n")
    return out


def import_sets(names: list[str] | None = None, out_dir: Path = REAL_DIR, source: Path | None = None) -> list[Path]:
    """`import_set` for each of ``names`` (default: every set of the catalog); ``source`` only with one set."""
    names = names or list(catalog()["sets"])
    if source is not None and len(names) != 1:
        raise RealDataError("--from is a copy of one repository: name the one set it holds")
    return [import_set(n, out_dir, source) for n in names]


def load_items(name: str, split: str | None = None, real_dir: Path = REAL_DIR) -> list[RealItem]:
    """The records of set ``name`` (``split``: only that split), from ``real_dir/<name>.jsonl.gz``."""
    path = Path(real_dir) / f"{name}.jsonl.gz"
    if not path.is_file():
        raise RealDataError(f"{path} is missing: run `spanuq import-real {name}` (it downloads the set, or reads "
                            "a local copy with --from DIR)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        items = [RealItem.from_json(json.loads(line)) for line in f if line.strip()]
    return [it for it in items if split is None or it.split == split]
