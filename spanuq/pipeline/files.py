"""Reading and writing record files (JSONL), atomically, and the content hash of a file."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` via a temp file + rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_user_text(path: str | Path, what: str = "file") -> str:
    """A text file a user gave (prompts, an answer to score): UTF-8, a leading BOM dropped; a clear
    ``ValueError`` naming the file when it is missing, a folder, unreadable or not UTF-8."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a {what}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: cannot read as UTF-8 text ({e.reason} at byte {e.start}); "
                         f"save the file as UTF-8") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the file ({e.strerror or e})") from None


def write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_jsonl(path: str | Path, rows: Iterable[BaseModel | dict]) -> int:
    lines = []
    for r in rows:
        d = r.model_dump(mode="json") if isinstance(r, BaseModel) else r
        lines.append(json.dumps(d, ensure_ascii=False))
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return len(lines)


def iter_jsonl(path: str | Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_records(path: str | Path, model: type[T]) -> list[T]:
    """Read a JSONL file into validated records of type `model`."""
    return [model.model_validate(d) for d in iter_jsonl(path)]


def sha256_tree(path: str | Path, skip: tuple[str, ...] = ("__pycache__",)) -> str:
    """Hex sha256 of a file, or of every file under a folder with its relative name (folders named in ``skip`` left out)."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    h = hashlib.sha256()
    for f in sorted(f for f in p.rglob("*") if f.is_file() and not set(f.relative_to(p).parts) & set(skip)):
        h.update(str(f.relative_to(p)).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()

