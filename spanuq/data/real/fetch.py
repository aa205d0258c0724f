"""The bytes of one pinned file of a public repository, checked against its SHA-256.

    raw = fetch_file("ryokamoi/wice", "ddeb6c1…", "data/non_supported_tokens/test.jsonl", "e79239…")
    raw = fetch_file(..., source=Path("~/src/wice"))     # a checkout or a git directory of that repository

Without ``source`` the file is downloaded from GitHub at the pinned commit (``raw.githubusercontent.com``).
With it, the file is read from a local copy: a working tree holding the path, or a git directory (a clone's
``.git``, a bare or mirrored repository) holding the commit.  Either way the bytes must hash to the catalog's
SHA-256: a file that cannot be had, or that differs, is a `RealDataError` naming the file — never skipped.
"""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

RAW_URL = "https://raw.githubusercontent.com/{repository}/{commit}/{path}"
TIMEOUT_S = 60


class RealDataError(RuntimeError):
    """A set's file could not be fetched, or is not the file the catalog pins."""


def _download(repository: str, commit: str, path: str) -> bytes:
    import httpx

    url = RAW_URL.format(repository=repository, commit=commit, path=path)
    try:
        r = httpx.get(url, timeout=TIMEOUT_S, follow_redirects=True)
    except httpx.HTTPError as e:
        raise RealDataError(f"{repository}@{commit[:7]}:{path}: could not download {url} ({type(e).__name__}: {e}); "
                            "without internet, pass a local copy of the repository with --from DIR") from None
    if r.status_code != 200:
        raise RealDataError(f"{repository}@{commit[:7]}:{path}: {url} answered HTTP {r.status_code}")
    return r.content


def _is_git_dir(d: Path) -> bool:
    return (d / "HEAD").is_file() and (d / "objects").is_dir()


def _from_local(source: Path, repository: str, commit: str, path: str) -> bytes:
    source = source.expanduser()
    if (source / path).is_file():
        return (source / path).read_bytes()
    git_dir = next((d for d in (source, source / ".git", source / "repo") if _is_git_dir(d)), None)
    if git_dir is None:
        raise RealDataError(f"{repository}:{path}: {source} holds neither the file nor a git directory of the repository")
    out = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
    if out.returncode != 0:
        raise RealDataError(f"{repository}@{commit[:7]}:{path}: not in {git_dir} "
                            f"({out.stderr.decode(errors='replace').strip()})")
    return out.stdout


def fetch_file(repository: str, commit: str, path: str, sha256: str, source: Path | None = None) -> bytes:
    """The file's bytes, downloaded (``source`` None) or read from a local copy, checked against ``sha256``."""
    raw = _download(repository, commit, path) if source is None else _from_local(Path(source), repository, commit, path)
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        where = "GitHub" if source is None else str(source)
        hint = (" (a Git LFS or git-annex pointer, not the file)" if raw.startswith(b"version https://git-lfs")
                else "")
        raise RealDataError(f"{repository}@{commit[:7]}:{path} from {where} has SHA-256 {got[:12]}…, the catalog pins "
                            f"{sha256[:12]}…{hint}")
    return raw
