"""Helpers of the browser tests: where things are, Chromium, the network guard, screenshots."""

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1"}
LOCAL_SCHEMES = {"data", "blob", "about", "chrome-error"}


def chromium_path() -> str:
    path = (
        os.environ.get("TFX_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if path:
        return path
    message = (
        "Chromium not found: `apt-get install chromium` (Debian/Ubuntu) enables the browser tests"
    )
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so they must run)", pytrace=False)
    pytest.skip(message)


class Guard:
    """Blocks and records every request to a host other than 127.0.0.1, and collects console
    errors."""

    def __init__(self, context):
        self.external, self.console_errors = [], []
        context.route("**/*", self._route)

    def _route(self, route):
        parts = urlsplit(route.request.url)
        if parts.scheme in LOCAL_SCHEMES or parts.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def watch(self, page):
        page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))
        page.on(
            "response",
            lambda r: r.status >= 400 and self.console_errors.append(f"HTTP {r.status}: {r.url}"),
        )
        return page

    def assert_local(self):
        assert not self.external, f"requests left 127.0.0.1: {sorted(set(self.external))[:10]}"


def screenshot(page, name: str, full_page: bool = False) -> None:
    """A test artifact for a person to look at: artifacts/<name>.png."""
    out = ARTIFACTS / f"{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=full_page)
