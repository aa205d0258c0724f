"""The project as a user's clone would hold it, copied for tests that run it elsewhere."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def copy_worktree(src: Path, dst: Path) -> Path:
    """Copy ``src``'s tracked files and its new files git does not ignore (what a commit of the
    working tree would hold) into ``dst``; returns ``dst``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=src, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for f in files:
        if (src / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / f, dst / f)
    return dst
