"""What the browser tests share: Debian's Chromium, its flags, and skip-or-fail under CI.

Used by ``test_browser.py`` (JupyterLab) and ``test_book.py`` (the static site). Without
Chromium or the playwright package a test skips, except under CI (``PGRL_CI=1``), where it
fails instead, so a missing install step cannot pass silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("PGRL_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def skip_or_fail(reason: str, what: str, how_to_enable: str) -> None:
    """Skip with a reason that says how to enable ``what``; under CI (PGRL_CI=1) fail."""
    if os.environ.get("PGRL_CI") == "1":
        pytest.fail(f"{reason}; PGRL_CI=1 requires the {what} to run: {how_to_enable}")
    pytest.skip(f"{reason}: {how_to_enable}")


def load_sync_playwright(what: str, how_to_enable: str):
    """playwright's ``sync_playwright``, or skip/fail if Chromium or playwright is missing."""
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium not found at {CHROMIUM}", what, how_to_enable)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("the playwright Python package is not installed", what, how_to_enable)
    return sync_playwright
