"""Browser fixtures: Debian's Chromium driven by Playwright, and a page whose every request must
stay on 127.0.0.1. Without Chromium the tests skip, except in CI (CI set), where they fail."""

import pytest
from browser_helpers import CHROMIUM_ARGS, Guard, chromium_path


@pytest.fixture(scope="session")
def browser():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def guarded(browser):
    """A fresh browser context and page, with the guard attached; the guard is checked after the
    test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    guard = Guard(context)
    page = guard.watch(context.new_page())
    yield page, guard
    context.close()
    guard.assert_local()


@pytest.fixture
def phone(browser):
    """Like `guarded`, at a phone's size (390 × 844, touch)."""
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    guard = Guard(context)
    page = guard.watch(context.new_page())
    yield page, guard
    context.close()
    guard.assert_local()
