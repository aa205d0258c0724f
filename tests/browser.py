"""Headless Chromium for page tests: Debian's `chromium` driven by Playwright (no `playwright install`).

``with chromium() as browser:`` for interactive pages (the web viewer); ``load(url)`` for a static
page: the DOM after load, every console message and page error, optionally a full-page screenshot.
"""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium():
    """``with chromium() as browser: page = browser.new_page()``; skips when Chromium or Playwright is missing."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("needs Chromium: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs `pip install playwright`")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Page:
    dom: str
    console: list[str]  # console messages of level error / warning, and uncaught page errors


def load(url: str, profile: Path | None = None, screenshot: Path | None = None,
         size: tuple[int, int] = (1280, 2200), timeout_s: float = 90) -> Page:
    """Open ``url`` and wait for the load event (``profile`` is unused: each call is a fresh context)."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": size[0], "height": min(size[1], 1200)})
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: console.append(str(e)))
        page.goto(url, wait_until="load", timeout=timeout_s * 1000)
        dom = page.content()
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        return Page(dom, console)
