"""Headless Chromium for browser tests: Debian's `chromium` driven by Playwright (no `playwright install`)."""
from __future__ import annotations

import shutil
from contextlib import contextmanager

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
