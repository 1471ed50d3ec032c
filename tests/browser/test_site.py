"""The built site (make site), served on loopback: every chapter page loads without console errors
and shows its outputs, formulas and widgets render from files the site serves itself, exercise
answers start collapsed, links resolve, and the static widgets answer the steps of
tests/widget_checks as the live ones do in JupyterLab."""

import functools
import http.server
import math
import re
import threading
import time
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
import yaml
from browser_helpers import ROOT, screenshot

from tfx.book.figures import COLUMN_PX
from tools import static_widgets
from tools.chapters import chapter_notebooks

HTML = ROOT / "book" / "_build" / "html"
CHAPTERS = chapter_notebooks()
CHECKS = ROOT / "tests" / "widget_checks"
STATIC = [
    p
    for p in CHAPTERS
    if static_widgets.declarations(p.stem) and (CHECKS / f"{p.stem}.yml").exists()
]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    if not (HTML / "index.html").exists():
        pytest.fail("no built site in book/_build/html: run `make site` first", pytrace=False)
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


def _stored(nb_path):
    """What a chapter's stored outputs promise the page will show."""
    nb = nbformat.read(nb_path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    state = (
        nb.metadata.get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    return {
        "widget_text": any(
            m["model_name"] == "OutputModel" and m["state"].get("outputs") for m in state.values()
        ),
        "text": any(
            o.get("output_type") == "stream" or "text/plain" in o.get("data", {}) for o in outputs
        ),
        "images": sum("image/png" in o.get("data", {}) for o in outputs),
        "widgets": sum(
            "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs
        ),
        "math": any(c.cell_type == "markdown" and "$" in c.source for c in nb.cells),
        "exercises": any(
            c.cell_type == "markdown" and re.search(r"^##+ Exercises", c.source, re.M)
            for c in nb.cells
        ),
        "answers": sum(
            c.cell_type == "code" and "hide-cell" in c.metadata.get("tags", []) for c in nb.cells
        ),
    }


def _assert_answers_collapsed(page, stem: str, n: int) -> None:
    """Each cell tagged hide-cell (an exercise's answer) sits in a closed <details>: neither its
    code nor its output shows until the reader opens it, and opening it works."""
    cells = page.locator(".cell.tag_hide-cell")
    assert cells.count() == n, f"{stem}: {n} hide-cell cells stored, {cells.count()} on the page"
    states = page.evaluate(
        "() => [...document.querySelectorAll('.cell.tag_hide-cell')].map(c => {"
        " const d = c.querySelector('details.hide');"
        " return d === null ? 'no toggle' : (d.open ? 'open' : 'closed'); })"
    )
    assert states == ["closed"] * n, f"{stem}: exercise answers do not start collapsed: {states}"
    for i in range(n):
        for part in (".cell_input", ".cell_output"):
            shown = [e.is_visible() for e in cells.nth(i).locator(part).all()]
            assert not any(shown), f"{stem}: the {part} of answer {i} shows before it is opened"
    cells.first.locator("details.hide > summary").first.click()
    assert cells.first.locator(".cell_input").first.is_visible(), (
        f"{stem}: the toggle does not open"
    )
    # each answer's code names its solution; the reasoning sits closed in its own dropdown
    prompts = cells.evaluate_all(
        "cs => cs.map(c => c.querySelector('details.hide > summary').innerText.trim())"
    )
    assert all(re.match(r"(Show|Hide) the code of solution \d+$", t) for t in prompts), prompts
    drops = page.locator(".admonition.dropdown").filter(has_text="Solution to exercise")
    assert drops.count() >= 1, f"{stem}: no solution dropdowns"
    body = drops.first.locator("p").nth(1)
    assert not body.is_visible(), f"{stem}: a solution's reasoning shows before it is opened"
    drops.first.locator(".admonition-title").click()
    body.wait_for(state="visible", timeout=5000)


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks/NN_slug.ipynb: the site has no chapters"


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_page(site, guarded, nb_path):
    page, guard = guarded
    expect = _stored(nb_path)
    response = page.goto(urljoin(site, f"chapters/{nb_path.stem}.html"), wait_until="networkidle")
    assert response.ok, f"{nb_path.stem}.html: HTTP {response.status}"
    assert page.locator("h1").count() >= 1
    if expect["text"]:
        assert page.locator(".cell_output .output").count() > 0, (
            "stored text outputs are not on the page"
        )
    if expect["images"]:
        images = page.locator(".cell_output img")
        assert images.count() >= expect["images"], "plots missing from the page"
        # figures load as the reader scrolls to them (loading="lazy"): load them all now
        page.evaluate(
            "() => document.querySelectorAll('img').forEach(i => { i.loading = 'eager'; })"
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('.cell_output img')].every(i => i.complete)",
            timeout=15000,
        )
        broken = page.evaluate(
            "() => [...document.querySelectorAll('.cell_output img')]"
            ".filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
        )
        assert not broken, f"images that did not load: {broken}"
        # every picture is a numbered figure, its caption under it and as its alt text
        figures = page.evaluate(
            "() => [...document.querySelectorAll('.cell_output img:not(.tfx-sw-picture)')]"
            ".map(i => { const f = i.closest('figure.tfx-figure');"
            " return {alt: i.alt, caption: f ? f.querySelector('figcaption').innerText : null,"
            " width: +i.getAttribute('width'), natural: i.naturalWidth,"
            " shown: i.getBoundingClientRect().width}; })"
        )
        number = int(nb_path.stem[:2])
        assert [f["caption"].split(".", 2)[:2] for f in figures] == [
            [f"Figure {number}", str(n)] for n in range(1, len(figures) + 1)
        ], figures
        assert all(f["alt"] and f["alt"] in f["caption"] for f in figures), figures
        # sharp (site review F6): a retina PNG holds twice the pixels of its display width, a
        # width that fits the desktop column (tfx.book.figures.COLUMN_PX); the page never shows
        # it wider than that (a narrower window may show it narrower, never blurred)
        for f in figures:
            where = (nb_path.stem, f["caption"][:40], f)
            assert 0 < f["width"] <= COLUMN_PX and abs(f["natural"] - 2 * f["width"]) <= 1, where
            assert 0 < f["shown"] <= f["width"] + 1, where
    if expect["math"]:
        page.wait_for_selector("mjx-container", state="attached", timeout=15000)
    if expect["widgets"]:  # saved widgets, or static ones (tools/static_widgets.py)
        page.wait_for_selector(".jupyter-widgets, .tfx-sw[data-ready]", timeout=15000)
    live = expect["widgets"] - page.locator(".tfx-sw").count()
    if live > 0 and expect["widget_text"]:
        # an Output widget's saved text, rendered by the locally served manager
        page.wait_for_function(
            "() => [...document.querySelectorAll('.widget-output')]"
            ".some(e => e.innerText.trim().length > 0)",
            timeout=15000,
        )
    screenshot(page, f"site/{nb_path.stem}", full_page=True)
    if expect["exercises"]:
        assert expect["answers"], f"{nb_path.stem}: exercise answers are not tagged hide-cell"
    if expect["answers"]:
        _assert_answers_collapsed(page, nb_path.stem, expect["answers"])
    assert not guard.console_errors, f"console errors on {nb_path.stem}: {guard.console_errors}"


def test_navigation(site, guarded):
    """Following 'next' from the introduction visits every chapter in order; every local link
    resolves."""
    page, guard = guarded
    page.goto(site, wait_until="networkidle")  # index.html redirects to the introduction
    assert page.url.endswith("intro.html"), page.url
    visited, links = [], set()
    for _ in range(len(CHAPTERS) + 5):
        visited.append(urlsplit(page.url).path.rsplit("/", 1)[-1])
        links |= set(
            page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
        )
        nxt = page.locator("a.right-next")
        if nxt.count() == 0:
            break
        page.goto(urljoin(page.url, nxt.first.get_attribute("href")), wait_until="load")
    chapters = [
        v.removesuffix(".html")
        for v in visited
        if v.removesuffix(".html") in {p.stem for p in CHAPTERS}
    ]
    assert chapters == [p.stem for p in CHAPTERS], f"'next' order: {visited}"
    assert "claims.html" in visited and "references.html" in visited
    local = sorted({u.split("#")[0] for u in links if urlsplit(u).hostname == "127.0.0.1"})
    bad = [u for u in local if not page.request.get(u).ok]
    assert not bad, f"links that do not resolve: {bad}"
    assert not guard.console_errors, guard.console_errors


def _visible_rows(page) -> list:
    return page.evaluate(
        "() => [...document.querySelectorAll('.tfx-claims-table tbody tr')]"
        ".filter(r => r.offsetParent !== null).map(r => ({id: r.id, text: r.innerText,"
        " ...r.dataset}))"
    )


def test_claims_page(site, guarded):
    """The Claims page (tools/claims.py): the filters and the search show exactly the rows they
    should, every link on the page resolves (a settling cell's anchor exists on its chapter page,
    the export downloads and agrees with the table), and at phone width every column is on
    screen. One page load."""
    page, guard = guarded
    response = page.goto(urljoin(site, "claims.html"), wait_until="networkidle")
    assert response.ok, f"claims.html: HTTP {response.status}"
    export = page.request.get(urljoin(site, "claims.json"))
    assert export.ok, "claims.json is not served next to claims.html"
    rows = export.json()["claims"]
    assert page.request.get(urljoin(site, "claims.csv")).ok
    form = page.locator("form.tfx-claims-filters")
    assert form.is_visible(), "the filters did not appear (tfx-claims.js did not run)"
    assert len(_visible_rows(page)) == len(rows), "not every row shows before filtering"
    count = form.locator(".tfx-claims-count")
    for name, key, value in (
        ("verdict", "verdict_class", "fails"),
        ("verdict", "verdict_class", "holds only when"),
        ("chapter", "chapter", "03"),
        ("article", "article", "N"),
        ("evidence", "evidence", "by reading"),
    ):
        form.locator(f"select[name='{name}']").select_option(value)
        shown = _visible_rows(page)
        want = [f"claims-{r['id'].lower()}" for r in rows if r[key] == value]
        assert [r["id"] for r in shown] == want, f"filter {name} = {value!r}"
        assert count.inner_text() == f"{len(want)} of {len(rows)} rows"
        form.locator(f"select[name='{name}']").select_option("")
    search = form.locator("input[name='q']")
    search.fill("A43")
    assert [r["id"] for r in _visible_rows(page)] == ["claims-a43"], "an id finds that claim only"
    search.fill("softmax")
    shown = _visible_rows(page)
    assert shown and all("softmax" in r["text"].lower() for r in shown), "search by words"
    assert len(shown) < len(rows)
    form.locator("select[name='verdict']").select_option("holds")
    assert all(r["verdict"] == "holds" for r in _visible_rows(page)), "search and filter combine"
    screenshot(page, "site/claims-filtered")
    search.fill("")
    form.locator("select[name='verdict']").select_option("")
    assert len(_visible_rows(page)) == len(rows)

    # every link on the page resolves; an anchor into a chapter exists there
    hrefs = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    local = [h for h in hrefs if urlsplit(h).hostname == "127.0.0.1"]
    pages = {}
    for href in local:
        url, _, anchor = href.partition("#")
        if url not in pages:
            got = page.request.get(url)
            assert got.ok, f"link that does not resolve: {href}"
            pages[url] = got.text() if url.endswith(".html") else ""
        if anchor and url.endswith(".html"):
            assert f'id="{anchor}"' in pages[url], f"missing anchor: {href}"
    settled = [r for r in rows if r["link"]]
    links = page.evaluate(
        "() => [...document.querySelectorAll('a.tfx-claim-link')].map(a => a.getAttribute('href'))"
    )
    assert links == [r["link"] for r in settled], "the table's links are not the export's"

    # a phone: every cell of every row within the screen's width, no sideways scroll
    page.set_viewport_size({"width": 390, "height": 844})
    off = page.evaluate(
        "() => [...document.querySelectorAll('.tfx-claims-table tbody td')].filter(td => {"
        " const r = td.getBoundingClientRect();"
        " return r.width === 0 || r.left < 0 || r.right > window.innerWidth + 0.5; })"
        ".map(td => td.parentElement.id + ' ' + td.dataset.label)"
    )
    assert not off, f"cells off screen at 390 px: {off[:10]} ({len(off)} in all)"
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at 390 px: {width} px wide"
    page.locator(".tfx-claims-table tbody tr").first.scroll_into_view_if_needed()
    page.wait_for_timeout(500)  # the sidebar's slide-out after the resize, for the picture only
    screenshot(page, "site/claims-phone")
    assert not guard.console_errors, f"console errors on claims.html: {guard.console_errors}"


def test_claim_headings_in_a_chapter(site, guarded):
    """In a chapter, claim headings stay out of the page's contents list, are smaller than section
    headings, and each links back to its row on the Claims page. One page load."""
    page, guard = guarded
    stem = next(p.stem for p in CHAPTERS if "# CLAIM " in p.read_text(encoding="utf-8"))
    page.goto(urljoin(site, f"chapters/{stem}.html"), wait_until="networkidle")
    backs = page.locator("a.tfx-claim-back")
    assert backs.count() > 0, f"{stem}: no link back to the Claims page"
    claims_html = page.request.get(urljoin(site, "claims.html")).text()
    for href in backs.evaluate_all("as => as.map(a => a.getAttribute('href'))"):
        assert href.startswith("../claims.html#claims-"), href
        assert f'id="{href.partition("#")[2]}"' in claims_html, f"no such row: {href}"
    shown = page.evaluate(
        "() => [...document.querySelectorAll('.bd-sidebar-secondary .page-toc a')]"
        ".filter(a => a.offsetParent !== null).map(a => a.getAttribute('href'))"
    )
    assert shown and not [h for h in shown if h.startswith("#claim-")], (
        f"{stem}: claim headings in the contents list: {shown}"
    )
    sizes = page.evaluate(
        "() => ['article section > h2', 'section[id^=\"claim-\"] > h3'].map(s =>"
        " parseFloat(getComputedStyle(document.querySelector(s)).fontSize))"
    )
    assert sizes[1] < sizes[0], f"{stem}: a claim heading is not smaller than a section: {sizes}"
    assert not guard.console_errors, f"console errors on {stem}: {guard.console_errors}"


def _live_target(nb, label: str, step: dict):
    """Where the live slider labelled `label` lands after the step's key presses: one press is
    one live step (on the static page, one press is one stop)."""
    for _, _, model_id, _ in static_widgets.widget_outputs(nb):
        for c in static_widgets.stored_controls(nb, model_id):
            if c.label == label:
                moves = int(step.get("times", 1)) * (1 if step["action"] == "right" else -1)
                if c.kind == "log":
                    return c, c.base ** (math.log(c.default, c.base) + moves * c.step)
                return c, c.default + moves * c.step
    raise AssertionError(f"no live slider labelled {label!r} in the chapter's saved widgets")


def _frame(widget) -> tuple:
    picture = widget.locator("img.tfx-sw-picture")
    src = picture.first.get_attribute("src") if picture.count() else None
    src = src if src and picture.first.is_visible() else None
    return widget.locator("pre.tfx-sw-text").inner_text(), src


def test_static_widget_picture_belongs_to_its_setting(site, guarded):
    """Chapter 11's bug zoo draws a figure for a few bugs only: after every bug button the page
    shows that setting's picture, or none, never the last bug's."""
    page, guard = guarded
    page.goto(urljoin(site, "chapters/11_bug_zoo.html"), wait_until="networkidle")
    page.wait_for_selector(".tfx-sw[data-ready]", timeout=15000)
    widget = page.locator(".tfx-sw").filter(has=page.locator(".tfx-sw-buttons button"))
    buttons = widget.locator(".tfx-sw-buttons button")
    seen = {True: 0, False: 0}
    for i in range(buttons.count()):
        buttons.nth(i).click()
        want = widget.evaluate(
            "w => { const d = window.tfxStaticWidgets[w.getAttribute('data-key')];"
            " const p = d.settings[w.getAttribute('data-setting')][1];"
            " return p === null ? null : d.pictures[p]; }"
        )
        if want is not None:  # a picture loads after the click: wait for it, as a reader would
            page.wait_for_function(
                "e => !e.hidden && e.complete && e.naturalWidth > 0",
                arg=widget.locator("img.tfx-sw-picture").element_handle(),
                timeout=10000,
            )
        src = _frame(widget)[1]
        name = buttons.nth(i).inner_text()
        assert (src is None) == (want is None), f"{name}: picture {src}, its setting's {want}"
        assert want is None or src.endswith(want.rsplit("/", 1)[-1]), f"{name}: {src} ≠ {want}"
        seen[want is not None] += 1
    assert seen[True] and seen[False], f"bugs with and without a picture: {seen}"
    assert not guard.console_errors, guard.console_errors


@pytest.mark.parametrize("nb_path", STATIC, ids=[p.stem for p in STATIC])
def test_static_widget(site, guarded, nb_path):
    """The steps of tests/widget_checks/NN_slug.yml on the static page: the controls start
    enabled by the script, a click or the key presses that reach the live slider's target value
    change the precomputed frame to what the kernel prints, and every picture shown loads."""
    page, guard = guarded
    nb = nbformat.read(nb_path, as_version=4)
    page.goto(urljoin(site, f"chapters/{nb_path.stem}.html"), wait_until="networkidle")
    page.wait_for_selector(".tfx-sw[data-ready]", timeout=15000)
    widgets = page.locator(".tfx-sw")
    assert widgets.count() == page.locator(".tfx-sw[data-ready]").count()
    assert widgets.first.locator(".tfx-sw-note").inner_text().startswith("This page shows")
    steps = yaml.safe_load((CHECKS / f"{nb_path.stem}.yml").read_text(encoding="utf-8"))["steps"]
    for i, step in enumerate(steps):
        label, where = step["label"], f"{nb_path.stem}, step {i + 1} ({step['label']!r})"
        if step["action"] == "click":
            exact = re.compile(rf"^\s*{re.escape(label)}\s*$")
            control = page.locator("label.tfx-sw-bool").filter(has_text=exact)
            control = (
                control.locator("input")
                if control.count()
                else page.locator(".tfx-sw-buttons button").filter(has_text=exact)
            )
        else:
            control = page.locator(f".tfx-sw-slider input[aria-label='{label}']")
        assert control.count() == 1, f"{where}: {control.count()} static controls so labelled"
        widget = widgets.filter(has=control)
        before = _frame(widget)
        assert control.is_enabled(), f"{where}: the control is still disabled"
        if step["action"] == "click":
            control.click()
        else:
            live, target = _live_target(nb, label, step)
            stops = [
                static_widgets.snap(live, v)
                for v in yaml.safe_load(control.get_attribute("data-values"))
            ]
            near = [
                j
                for j, v in enumerate(stops)
                if math.isclose(v, target, rel_tol=1e-6, abs_tol=1e-9)
            ]
            assert near, f"{where}: the live target {target} is not a stop {stops}"
            moves = near[0] - int(control.input_value())
            control.focus()
            for _ in range(abs(moves)):
                page.keyboard.press("ArrowRight" if moves > 0 else "ArrowLeft")
        deadline = time.time() + 10
        while not re.search(step["expect"], _frame(widget)[0]) and time.time() < deadline:
            time.sleep(0.1)
        after = _frame(widget)
        screenshot(page, f"site/{nb_path.stem}-static-step{i + 1}")
        assert re.search(step["expect"], after[0]), (
            f"{where}: expected /{step['expect']}/ in the static frame, got:\n{after[0][-1500:]}"
        )
        assert after != before, f"{where}: the frame did not change"
        if after[1]:
            page.wait_for_function(
                "e => e.complete && e.naturalWidth > 0",
                arg=widget.locator("img.tfx-sw-picture").element_handle(),
                timeout=10000,
            )
    assert not guard.console_errors, f"console errors on {nb_path.stem}: {guard.console_errors}"


def test_static_widget_off_the_grid_says_what_moved(site, guarded):
    """Chapter 03's grid holds every combination within two groups of controls, not across them.
    A move that leaves the grid shows the nearest precomputed setting that keeps the control the
    reader moved, and a line says which other control went back; the note says so beforehand."""
    page, guard = guarded
    page.goto(urljoin(site, "chapters/03_attention.html"), wait_until="networkidle")
    page.wait_for_selector(".tfx-sw[data-ready]", timeout=15000)
    widget = page.locator(".tfx-sw").first
    notice = widget.locator(".tfx-sw-moved")
    assert "combinations are precomputed" in widget.locator(".tfx-sw-note").inner_text()
    widget.locator("select[data-label='scaled head']").select_option(label="previous")
    assert notice.is_hidden()  # on the grid: nothing moved
    slider = widget.locator("input[data-label='temperature']")
    start = int(slider.input_value())
    slider.focus()
    page.keyboard.press("ArrowRight")
    assert int(slider.input_value()) == start + 1  # the reader's move is kept
    assert widget.locator("select[data-label='scaled head']").input_value() == "0"  # none
    assert notice.is_visible() and "“scaled head” to none" in notice.inner_text()
    page.keyboard.press("ArrowLeft")  # back on the grid: the line goes
    assert notice.is_hidden()
    assert not guard.console_errors, guard.console_errors


# ---------------------------------------------------------------------------------------------
# Reading: phones, the book's reading copies of the chapters (tools/prepare_book.py), code width

PAGES = ["intro", "claims", "troubleshooting", "references"] + [
    f"chapters/{p.stem}" for p in CHAPTERS
]
SIDEWAYS = "() => [document.documentElement.scrollWidth, window.innerWidth]"


# a search box (desktop) or the magnifier button that opens the same dialog (phone)
SEARCH_BOXES = (
    "() => [...document.querySelectorAll('.search-button__button')]"
    ".filter(b => b.offsetParent !== null).length"
)


def test_one_search_box(site, guarded, phone):
    """One way to search on screen: at desktop width one search box (the top bar that held only a
    second copy is gone, site review F14), at phone width one magnifier button; each opens the
    search dialog."""
    for page, _ in (guarded, phone):
        page.goto(urljoin(site, "chapters/03_attention.html"), wait_until="networkidle")
        assert page.evaluate(SEARCH_BOXES) == 1, page.viewport_size
        page.locator(".search-button__button:visible").first.click()
        page.wait_for_selector("#pst-search-dialog[open]", timeout=5000)
        page.keyboard.press("Escape")
    for _, guard in (guarded, phone):
        assert not guard.console_errors, guard.console_errors


SEARCH_EXCERPTS = (
    "() => [...document.querySelectorAll('#search-results li p.context')].map(p => p.innerText)"
)


def _excerpts(page, url: str) -> list:
    page.goto(url, wait_until="load")
    page.wait_for_function(
        "() => /found/.test((document.querySelector('#search-results p.search-summary')"
        " || {}).innerText || '')",
        timeout=20000,
    )
    return page.evaluate(SEARCH_EXCERPTS)


def _assert_prose(excerpts: list) -> None:
    assert len(excerpts) >= 3, excerpts
    tex = [e for e in excerpts if re.search(r"\\[A-Za-z(\[]|\$", e)]
    assert not tex, f"TeX in excerpts: {tex[:3]}"
    code = [e for e in excerpts if re.search(r"\bimport\b|^\s*from tfx|\|\s*-{3}|\|—", e)]
    assert not code, f"code or table markup in excerpts: {code[:3]}"


def test_search_excerpts_come_from_prose(site, guarded):
    """Search results over http come with excerpts cut from the book's prose (tools/site.py,
    book/_assets/tfx-search.js): no import lines or contents lists, maths as plain text
    ("QKᵀ/√d_k"), never TeX source (site review F13, issue 46)."""
    page, guard = guarded
    excerpts = _excerpts(page, urljoin(site, "search.html?q=softmax"))
    _assert_prose(excerpts)
    assert all("softmax" in e.lower() for e in excerpts), excerpts
    _assert_prose(_excerpts(page, urljoin(site, "search.html?q=attention+mask")))
    assert not guard.console_errors, guard.console_errors


def test_search_from_files(browser):
    """Opened as files (file://), search shows the same excerpts, with no console errors: Sphinx
    fetched each result's page for its excerpt, which a browser refuses from file:// (about 70
    errors per query, issue 46). Pages other than the search page load no search index."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors, requests = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    try:
        _assert_prose(_excerpts(page, (HTML / "search.html").as_uri() + "?q=softmax"))
        assert not [r for r in requests if not r.startswith(("file:", "data:"))], requests
        page.goto((HTML / "chapters" / f"{CHAPTERS[0].stem}.html").as_uri(), wait_until="load")
        scripts = page.evaluate(
            "() => [...document.scripts].map(s => s.getAttribute('src') || '').filter(Boolean)"
        )
        heavy = [s for s in scripts if re.search(r"searchindex|searchtools|fontawesome", s)]
        assert not heavy, f"a chapter loads what only the search page needs: {heavy}"
    finally:
        context.close()
    assert not errors, errors[:5]


def test_phone_menus(site, phone):
    """At 390 px the ☰ button opens the chapter list and the 'On this page' button the page's
    contents (pydata-sphinx-theme 0.17.1 binds both to hidden copies: book/_assets/tfx-phone.js)."""
    page, guard = phone
    stem = CHAPTERS[min(1, len(CHAPTERS) - 1)].stem
    page.goto(urljoin(site, f"chapters/{stem}.html"), wait_until="networkidle")
    for toggle, dialog in (
        ("primary", "#pst-primary-sidebar-modal"),
        ("secondary", "#pst-secondary-sidebar-modal"),
    ):
        button = page.locator(f".bd-header-article button.{toggle}-toggle")
        assert button.is_visible(), f"no visible {toggle} toggle at phone width"
        button.tap()
        page.wait_for_selector(f"{dialog}[open]", timeout=5000)
        assert page.locator(f"{dialog} a[href]").first.is_visible(), f"{dialog}: no links shown"
        page.keyboard.press("Escape")
        page.wait_for_selector(f"{dialog}:not([open])", state="attached", timeout=5000)
    # a tap on an entry of "On this page" closes the drawer and shows that section (issue 46)
    page.locator(".bd-header-article button.secondary-toggle").tap()
    page.wait_for_selector("#pst-secondary-sidebar-modal[open]", timeout=5000)
    entry = page.locator("#pst-secondary-sidebar-modal a[href^='#']:visible").nth(1)
    target = entry.get_attribute("href")
    entry.tap()
    page.wait_for_selector(
        "#pst-secondary-sidebar-modal:not([open])", state="attached", timeout=5000
    )
    page.wait_for_function(
        "id => { const r = document.getElementById(id).getBoundingClientRect();"
        " return r.top >= 0 && r.top < window.innerHeight / 2; }",
        arg=target[1:],
        timeout=5000,
    )
    # Escape closes it with the focus anywhere on the page
    page.locator(".bd-header-article button.secondary-toggle").tap()
    page.wait_for_selector("#pst-secondary-sidebar-modal[open]", timeout=5000)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.keyboard.press("Escape")
    page.wait_for_selector(
        "#pst-secondary-sidebar-modal:not([open])", state="attached", timeout=5000
    )
    assert not guard.console_errors, guard.console_errors


def test_phone_figure_opens_full_size(site, phone):
    """On a phone a chapter figure drawn wider than the column shows shrunk; a tap opens it at its
    drawn size in a dialog that scrolls, and a tap or Escape closes it."""
    page, guard = phone
    page.goto(urljoin(site, "chapters/07_masked_lm.html"), wait_until="load")
    figure = page.locator(".cell_output img").first
    figure.scroll_into_view_if_needed()
    page.wait_for_function("e => e.complete && e.naturalWidth > 0", arg=figure.element_handle())
    shown, drawn = figure.evaluate("e => [e.clientWidth, e.naturalWidth]")
    assert shown < 0.5 * drawn, f"the figure is not shrunk on a phone: {shown} of {drawn} px"
    for close in ("Escape", "tap"):
        figure.click()
        zoom = page.locator("dialog.tfx-zoom[open] img")
        zoom.wait_for(timeout=5000)
        assert zoom.evaluate("e => e.clientWidth") == drawn  # full size, scrolling in the dialog
        if close == "Escape":
            page.keyboard.press("Escape")
        else:
            page.locator("dialog.tfx-zoom").click()
        page.wait_for_selector("dialog.tfx-zoom", state="detached", timeout=5000)
    assert not guard.console_errors, guard.console_errors


def test_static_widget_long_table_keeps_picture_near(site, guarded):
    """Chapter 06's widget at its deepest stack prints a table of one row per layer: the table
    scrolls inside its panel, so the picture starts within one screen of the controls."""
    page, guard = guarded
    page.goto(urljoin(site, "chapters/06_gradient_flow.html"), wait_until="networkidle")
    page.wait_for_selector(".tfx-sw[data-ready]", timeout=15000)
    slider = page.locator(".tfx-sw-slider input[aria-label='depth']")
    assert slider.count() == 1, "chapter 06's widget has no 'depth' slider"
    widget = page.locator(".tfx-sw").filter(has=slider)
    slider.focus()
    page.keyboard.press("End")
    text = widget.locator("pre.tfx-sw-text")
    page.wait_for_function("e => e.scrollHeight > e.clientHeight", arg=text.element_handle())
    gap = widget.evaluate(
        "w => w.querySelector('.tfx-sw-picture').getBoundingClientRect().top"
        " - w.querySelector('.tfx-sw-controls').getBoundingClientRect().bottom"
    )
    assert gap < 0.6 * 900, f"the picture starts {gap:.0f} px below the controls"
    assert not guard.console_errors, guard.console_errors


def test_phone_no_sideways_scroll(site, phone):
    """No page is wider than a 390 px phone: long inline code breaks, code and text outputs wrap,
    wide equations scroll inside themselves."""
    page, guard = phone
    wide = {}
    for name in PAGES:
        page.goto(urljoin(site, f"{name}.html"), wait_until="load")
        scroll, inner = page.evaluate(SIDEWAYS)
        if scroll > inner:
            wide[name] = scroll
    assert not wide, f"pages that scroll sideways at 390 px (their widths): {wide}"
    assert not guard.console_errors, guard.console_errors


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_reading_copy(site, guarded, nb_path):
    """A chapter page shows no test machinery in its code, starts with the setup cell's code
    folded (its banner in view) and every show_source listing folded; no code or text output
    scrolls sideways; the ipywidgets manager loads only where a saved widget needs it."""
    page, guard = guarded
    stem = nb_path.stem
    page.goto(urljoin(site, f"chapters/{stem}.html"), wait_until="load")
    code = page.evaluate(
        "() => [...document.querySelectorAll('.cell_input pre')].map(p => p.textContent)"
    )
    assert code, f"{stem}: no code cells on the page"
    leaks = [
        line
        for text in code
        for line in text.splitlines()
        if re.search(r"NBVAL_|\bnbval\b|^\s*# CLAIM [AN]\d+:|# noqa|# isort:|# fmt:", line, re.I)
    ]
    assert not leaks, f"{stem}: test machinery in the code: {leaks[:5]}"
    first = page.locator(".cell").first
    classes = first.get_attribute("class") or ""
    assert "tag_hide-input" in classes, f"{stem}: the setup cell is not folded ({classes})"
    assert not first.locator(".cell_input").first.is_visible(), f"{stem}: setup code shows"
    assert (
        first.locator("details.hide > summary")
        .first.inner_text()
        .strip()
        .startswith("Show the setup code")
    )
    assert first.locator(".cell_output").first.is_visible(), f"{stem}: the banner is hidden"
    listings = page.locator("details.tfx-source")
    states = listings.evaluate_all("ds => ds.map(d => d.open)")
    assert not any(states), f"{stem}: a show_source listing starts open"
    if "show_source(" in nb_path.read_text(encoding="utf-8"):
        assert states, f"{stem}: show_source listings are not folded"
        listings.first.locator("summary").click()
        assert listings.first.locator("pre").first.is_visible(), f"{stem}: a listing won't open"
    wide = page.evaluate(
        "() => [...document.querySelectorAll('.cell_input pre')]"
        ".filter(p => p.offsetParent !== null && p.scrollWidth > p.clientWidth + 1)"
        ".map(p => p.textContent.slice(0, 60))"
    )
    assert not wide, f"{stem}: code that scrolls sideways: {wide[:3]}"
    # outputs are printed tables: they keep their lines (and scroll inside themselves if wide)
    wrapping = page.evaluate(
        "() => [...document.querySelectorAll('.cell_output pre')]"
        ".filter(p => getComputedStyle(p).whiteSpace !== 'pre').length"
    )
    assert wrapping == 0, f"{stem}: {wrapping} outputs wrap their lines"
    if int(stem[:2]) < 90:  # the map of BERT under the title, drawn at build time, with alt text
        maps = page.locator("figure.tfx-map img")
        assert maps.count() == 1, f"{stem}: {maps.count()} maps of BERT under the title"
        assert maps.evaluate("i => i.complete && i.naturalWidth > 0"), f"{stem}: the map is broken"
        assert maps.get_attribute("alt").startswith("A map of BERT-base")
        assert "Where this chapter works" in page.locator("figure.tfx-map figcaption").inner_text()
    if page.locator(".tfx-sw").count() and not page.locator(".jupyter-widgets").count():
        manager = page.locator("script[src*='embed-amd'], script[src*='require.min']")
        assert manager.count() == 0, f"{stem}: loads the widget manager it does not use"
    assert not guard.console_errors, f"console errors on {stem}: {guard.console_errors}"


def test_no_widget_manager_without_widgets(site, guarded):
    """Pages without a saved widget do not load the 3.6 MB ipywidgets manager."""
    page, guard = guarded
    for name in ("intro", "claims", "references"):
        page.goto(urljoin(site, f"{name}.html"), wait_until="load")
        scripts = page.evaluate(
            "() => [...document.scripts].map(s => s.getAttribute('src') || '').filter(Boolean)"
        )
        assert not [s for s in scripts if "embed-amd" in s or "require.min" in s], (name, scripts)
    assert not guard.console_errors, guard.console_errors


# ---------------------------------------------------------------------------------------------
# After a newcomer's read (issue 46)


def test_markdown_outputs_render_their_tables(site, guarded):
    """A Markdown output's table (chapter 11's troubleshooting table) is a table on the page, not
    a paragraph of pipes (myst-nb read Markdown outputs as CommonMark, which has no tables)."""
    page, guard = guarded
    stems = [p.stem for p in CHAPTERS if "Markdown(" in p.read_text(encoding="utf-8")]
    assert stems, "no chapter prints a Markdown output"
    for stem in stems:
        page.goto(urljoin(site, f"chapters/{stem}.html"), wait_until="load")
        rows = page.locator(".cell_output table tbody tr")
        assert rows.count() >= 3, f"{stem}: the Markdown output's table did not render"
        pipes = page.evaluate(
            "() => [...document.querySelectorAll('article p')]"
            ".filter(p => /^\\s*\\|/.test(p.innerText)).map(p => p.innerText.slice(0, 80))"
        )
        assert not pipes, f"{stem}: Markdown table rows shown as text: {pipes}"
    assert not guard.console_errors, guard.console_errors


# each wrapped line of code: [indent, left of its first row, lefts of the rows after it, one ch]
WRAPPED_LINES = """() => {
  const ch = (() => { const pre = document.querySelector('.cell_input pre');
    const s = document.createElement('span'); s.textContent = 'x'.repeat(40);
    pre.appendChild(s); const w = s.getBoundingClientRect().width / 40; s.remove(); return w; })();
  return [...document.querySelectorAll('.cell_input pre .tfx-line')]
    .filter(l => l.offsetParent !== null).map(l => {
      const r = document.createRange(); r.selectNodeContents(l);
      const rows = new Map();
      for (const b of r.getClientRects()) {
        if (b.width === 0) continue;
        const top = Math.round(b.top);
        rows.set(top, Math.min(rows.has(top) ? rows.get(top) : Infinity, b.left));
      }
      const lefts = [...rows.entries()].sort((a, b) => a[0] - b[0]).map(e => e[1]);
      const indent = l.textContent.length - l.textContent.trimStart().length;
      return [indent, lefts[0], lefts.slice(1), ch, l.textContent.slice(0, 60)];
    }).filter(x => x[2].length > 0);
}"""
SPLIT_NUMBERS = (
    "() => [...document.querySelectorAll('.cell_input pre :is(.m, .mf, .mi, .mh, .mo, .mb)')]"
    ".filter(n => n.offsetParent !== null && n.getClientRects().length > 1).map(n => n.textContent)"
)


@pytest.mark.parametrize("width", [1280, 390])
def test_code_wraps_with_a_hanging_indent(site, browser, width):
    """A line of code longer than the column wraps with a hanging indent: its continuation starts
    at least four columns right of the line's own indent, never in column 0 where a wrapped
    comment read as code; and never inside a number ("1.1e-" / "06")."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        wrapped = 0
        for stem in ("03_attention", "06_gradient_flow"):
            page.goto(urljoin(site, f"chapters/{stem}.html"), wait_until="load")
            lines = page.evaluate(WRAPPED_LINES)
            wrapped += len(lines)
            bad = [
                (text, indent, [round(x - first) for x in rest])
                for indent, first, rest, ch, text in lines
                if min(rest) < first + (indent + 4) * ch - 1
            ]
            assert not bad, (
                f"{stem} at {width} px: continuations left of the hanging indent {bad[:3]}"
            )
            assert not page.evaluate(SPLIT_NUMBERS), f"{stem} at {width} px: a number split"
        if width == 390:
            assert wrapped > 0, "nothing wrapped at phone width: the check checked nothing"
    finally:
        context.close()


def test_troubleshooting_table_fits(site, guarded, phone):
    """The Troubleshooting page's table fits its column on a desktop (no column clipped behind a
    scroller, its code readable), and on a phone each row is a card of labelled lines, like the
    Claims page's (issue 46)."""
    page, guard = guarded
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(urljoin(site, "troubleshooting.html"), wait_until="load")
    table = page.locator(".tfx-cards table")
    assert table.count() == 1 and table.locator("tbody tr").count() >= 10
    clipped = page.evaluate(
        "() => { const t = document.querySelector('.tfx-cards table');"
        " const box = t.parentElement; return [t.scrollWidth, box.clientWidth]; }"
    )
    assert clipped[0] <= clipped[1] + 1, f"the table is wider than its box: {clipped}"
    code = page.evaluate(
        "() => Math.min(...[...document.querySelectorAll('.tfx-cards td code')]"
        ".map(c => c.closest('td').getBoundingClientRect().width))"
    )
    assert code >= 180, f"the code column is {code:.0f} px wide"
    assert not guard.console_errors, guard.console_errors

    page, guard = phone
    page.goto(urljoin(site, "troubleshooting.html"), wait_until="load")
    cells = page.evaluate(
        "() => { const heads = [...document.querySelectorAll('.tfx-cards thead th')]"
        ".map(th => th.innerText.trim());"
        " return [...document.querySelectorAll('.tfx-cards tbody td')].map((td, i) => {"
        " const r = td.getBoundingClientRect();"
        " return {left: r.left, right: r.right, width: r.width, label: td.dataset.label,"
        " want: heads[td.cellIndex]}; }); }"
    )
    off = [c for c in cells if c["width"] == 0 or c["left"] < 0 or c["right"] > 390.5]
    assert not off, f"cells off screen at 390 px: {off[:5]}"
    assert all(c["label"] == c["want"] for c in cells), "cells not labelled with their column"
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at 390 px: {width} px wide"
    screenshot(page, "site/troubleshooting-phone")
    assert not guard.console_errors, guard.console_errors


def test_no_control_that_does_nothing(site, guarded):
    """A static widget shows no control that cannot move (a greyed "your text" field looks live and
    does nothing: hidden, the note names it); every option of the Claims page's filters finds a
    row (issue 46)."""
    page, guard = guarded
    for nb_path in [p for p in CHAPTERS if static_widgets.declarations(p.stem)]:
        page.goto(urljoin(site, f"chapters/{nb_path.stem}.html"), wait_until="load")
        page.wait_for_selector(".tfx-sw[data-ready]", timeout=15000)
        dead = page.evaluate(
            "() => [...document.querySelectorAll('.tfx-sw [data-control]')]"
            ".filter(c => c.offsetParent !== null && JSON.parse(c.dataset.values).length < 2)"
            ".map(c => c.dataset.label)"
        )
        assert not dead, f"{nb_path.stem}: controls shown that cannot move: {dead}"
    page.goto(urljoin(site, "claims.html"), wait_until="load")
    form = page.locator("form.tfx-claims-filters")
    empty = []
    for select in form.locator("select").all():
        for value in select.evaluate("s => [...s.options].map(o => o.value).filter(Boolean)"):
            select.select_option(value)
            if not _visible_rows(page):
                empty.append((select.get_attribute("name"), value))
        select.select_option("")
    assert not empty, f"filter options that show no row: {empty}"
    assert not guard.console_errors, guard.console_errors


def test_page_weight(site, guarded):
    """What a page loads before its content (scripts, styles, fonts) stays under 1 MB besides
    MathJax, which only pages with maths load; a chapter's figures are files loaded as the
    reader scrolls, not inlined; _static holds no source maps and no widget manager that no page
    loads (issue 46: 2.5 MB on every page, 1.5 MB of inlined figures in chapter 07)."""
    page, guard = guarded
    stem = next(p.stem for p in CHAPTERS if p.stem.startswith("07")) if CHAPTERS else None
    for name in ["intro", "claims", "troubleshooting", f"chapters/{stem}"]:
        page.goto(urljoin(site, f"{name}.html"), wait_until="networkidle")
        sizes = page.evaluate(
            "() => performance.getEntriesByType('resource')"
            ".filter(r => ['script', 'link', 'css'].includes(r.initiatorType)"
            " || /\\.(woff2?|ttf)$/.test(r.name)).map(r => [r.name, r.encodedBodySize])"
        )
        fixed = sum(n for url, n in sizes if "mathjax" not in url)
        assert fixed < 1_000_000, (
            f"{name}: {fixed} bytes before content: {sorted(sizes, key=lambda x: -x[1])[:5]}"
        )
    html = (HTML / "chapters" / f"{stem}.html").read_text(encoding="utf-8")
    assert "data:image/png;base64" not in html, f"{stem}: figures inlined in the page"
    lazy = page.evaluate(
        "() => [...document.querySelectorAll('figure.tfx-figure img')].map(i => i.loading)"
    )
    assert lazy and set(lazy) == {"lazy"}, lazy
    static = HTML / "_static"
    shipped = [p.name for p in static.rglob("*.map")] + [
        p.name for p in static.glob("embed-amd.js") if "embed-amd.js" not in _all_pages()
    ]
    assert not shipped, f"files no page loads: {shipped[:5]}"
    assert not guard.console_errors, guard.console_errors


def _all_pages() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in HTML.rglob("*.html"))
