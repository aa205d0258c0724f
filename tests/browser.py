"""Headless Chromium (Debian `chromium`) for page tests: the DOM after load, console messages, a screenshot."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0"]
_CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]\s*(.*)")


@dataclass
class Page:
    dom: str
    console: list[str]  # every console message (errors, uncaught exceptions, failed loads, logs)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def load(url: str, profile: Path, screenshot: Path | None = None, size: tuple[int, int] = (1280, 2200),
         timeout: float = 90) -> Page:
    """Open ``url``; the serialized DOM after load and the console messages; optionally a PNG screenshot."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    base = [exe, *FLAGS, f"--user-data-dir={profile}"]
    out = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"chromium failed ({out.returncode}): {out.stderr[-2000:]}")
    console = [m.group(1) for m in map(_CONSOLE.search, out.stderr.splitlines()) if m]
    if screenshot is not None:
        shot = subprocess.run(base + [f"--screenshot={screenshot}", f"--window-size={size[0]},{size[1]}",
                                      "--hide-scrollbars", url], capture_output=True, text=True, timeout=timeout)
        if shot.returncode != 0 or not Path(screenshot).exists():
            raise RuntimeError(f"chromium screenshot failed: {shot.stderr[-2000:]}")
    return Page(out.stdout, console)
