"""The book's reading copies of the chapters (tools/prepare_book.py, reading_cells): the tools'
lines leave the code, the setup cell's code and the show_source listings start collapsed, and
everything else is kept."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import prepare_book
from tools.claims import CODE_RE
from tools.prepare_book import reading_cells, strip_machinery

SETUP = (
    "import tfx  # first: importing tfx quiets torchao's import-time log lines\n\n"
    "# isort: split\n"
    "import torch\n\n"
    "tfx.banner()"
)
LISTING_HTML = (
    "<div style='font-size:85%;color:#555'>"
    "<code>tfx.model.attention.MultiHeadAttention</code></div>"
    '<div class="highlight"><pre>class MultiHeadAttention:\n    pass\n</pre></div>'
)


def _chapter():
    return new_notebook(
        cells=[
            new_markdown_cell("# 03 · Attention"),
            new_code_cell(SETUP, outputs=[new_output("stream", text="Python 3.11 · torch 2.x\n")]),
            new_code_cell(
                "# CLAIM A1: holds only when the scores are scaled\n"
                "# NBVAL_CHECK_OUTPUT\n"
                "f = lambda x: x  # noqa: E731\n"
                "from a import b  # noqa: E402  (imported here: its import warns)\n"
                "assert f(1) == 1  # one\n"
            ),
            new_code_cell(
                "tfx.book.source.show_source(MultiHeadAttention)",
                outputs=[
                    new_output(
                        "display_data",
                        data={
                            "text/html": LISTING_HTML,
                            "text/plain": "# tfx.model.attention.MultiHeadAttention\n"
                            "class MultiHeadAttention:\n    pass\n",
                        },
                    )
                ],
            ),
            new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint('1.2 ms')", metadata={"tags": ["x"]}),
            new_code_cell("# Solutions\nprint(1)", metadata={"tags": ["hide-cell"]}),
            new_code_cell(
                "# NBVAL_CHECK_OUTPUT\n# 3. the norm\nprint(2)", metadata={"tags": ["hide-cell"]}
            ),
        ]
    )


def test_strip_machinery():
    assert strip_machinery("# CLAIM A1: holds\n# NBVAL_CHECK_OUTPUT\nx = 1") == "x = 1"
    assert strip_machinery("import tfx\n\n# isort: split\nimport torch") == (
        "import tfx\n\nimport torch"
    )
    assert strip_machinery("f = lambda x: x  # noqa: E731") == "f = lambda x: x"
    assert strip_machinery("y = 1  # noqa") == "y = 1"
    assert strip_machinery("x = [1, 2]  # fmt: skip") == "x = [1, 2]"
    assert (
        strip_machinery("    self.d_k = d  # noqa: F841  binds self.d_k and a local d_v")
        == "    self.d_k = d  # binds self.d_k and a local d_v"
    )
    # only a first line is a claim line; ordinary comments stay
    assert strip_machinery("x = 1\n# CLAIM A1: holds") == "x = 1\n# CLAIM A1: holds"
    assert strip_machinery("# magnitudes: why\nx = 1  # (B, L, d)") == (
        "# magnitudes: why\nx = 1  # (B, L, d)"
    )


def test_reading_cells():
    original = _chapter()
    nb = reading_cells(nbformat.reads(nbformat.writes(original), as_version=4))
    assert nb.cells[0] == original.cells[0]  # markdown untouched
    setup, claim, listing, timing, answer, third = nb.cells[1:]
    # the setup cell: code collapsed under its own prompt, the banner it prints kept in view
    assert setup.source == SETUP.replace("# isort: split\n", "")
    assert "isort" not in setup.source
    assert setup.metadata["tags"] == ["hide-input"]
    assert setup.metadata["mystnb"]["code_prompt_show"] == "Show the setup code"
    assert setup.outputs == original.cells[1].outputs
    # the claim cell: no claim line, marker or linter comment; the words after a noqa code stay
    assert claim.source == (
        "f = lambda x: x\n"
        "from a import b  # imported here: its import warns\n"
        "assert f(1) == 1  # one\n"
    )
    assert not CODE_RE.match(claim.source.split("\n", 1)[0])
    # the listing: folded into a closed <details> naming the object and its length
    page = listing.outputs[0]["data"]["text/html"]
    assert page.startswith('<details class="tfx-source"><summary>Source of ')
    assert "<code>tfx.model.attention.MultiHeadAttention</code> (2 lines)</summary>" in page
    assert "font-size:85%" not in page and "class MultiHeadAttention:" in page
    assert " open" not in page.split(">", 1)[0]
    assert (
        listing.outputs[0]["data"]["text/plain"]
        == (original.cells[3].outputs[0]["data"]["text/plain"])
    )
    assert "tags" not in listing.metadata
    # the rest keeps its tags: an exercise answer stays hide-cell, nothing else is hidden
    assert timing.source == "print('1.2 ms')" and timing.metadata["tags"] == ["x"]
    assert answer.metadata["tags"] == ["hide-cell"]
    assert answer.metadata["mystnb"]["code_prompt_show"] == "Show the solution"
    # an answer cell `# N. …` names the exercise whose solution it checks
    assert third.source == "# 3. the norm\nprint(2)"
    assert third.metadata["mystnb"]["code_prompt_show"] == "Show the code of solution 3"
    assert third.metadata["mystnb"]["code_prompt_hide"] == "Hide the code of solution 3"
    assert "mystnb" not in timing.metadata
    nbformat.validate(nb)


def test_no_banner_no_collapse():
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("tfx.banner()")])
    reading_cells(nb)
    assert all("tags" not in c.metadata for c in nb.cells)


def test_figures_are_numbered_and_captioned(tmp_path, monkeypatch):
    """Each picture of a chapter becomes a figure with its `# Figure 3.n:` caption under it and as
    its alt text (a caption may run over indented comment lines), a retina PNG at its display
    size, written to a file that the page loads lazily (not inlined, issue 46); the caption
    lines leave the code;
    a cell whose pictures and captions differ in number, or a figure out of turn, stops the
    build."""
    monkeypatch.setattr(prepare_book, "FIGURES", tmp_path)
    png = {"image/png": "iVBORw0KGgo=\n", "text/plain": "<Figure size 640x480 with 1 Axes>"}
    drawn = [nbformat.v4.new_output("display_data", data=dict(png)) for _ in range(4)]
    drawn[2]["metadata"] = {"image/png": {"width": 320, "height": 240}}  # a retina PNG
    nb = new_notebook(
        cells=[
            new_code_cell("# Figure 3.1: the first <one>.\nplot()", outputs=[drawn[0]]),
            new_code_cell(
                "# NBVAL_CHECK_OUTPUT\n# Figure 3.2: left,\n#   and more of it.\n"
                "# Figure 3.3: right.\n# a plain comment\nplot(); plot()",
                outputs=[nbformat.v4.new_output("stream", name="stdout", text="hi\n"), *drawn[1:3]],
            ),
        ]
    )
    reading_cells(nb, "3", "03_x")
    first, second = nb.cells
    assert first.source == "plot()"
    assert second.source == "# a plain comment\nplot(); plot()"
    html = [o["data"]["text/html"] for c in nb.cells for o in c.outputs if "data" in o]
    assert len(html) == 3 and all(set(o["data"]) == {"text/html"} for o in first.outputs)
    assert 'alt="the first &lt;one&gt;."' in html[0] and 'id="figure-3-1"' in html[0]
    assert "Figure 3.1.</span> the first &lt;one&gt;.</figcaption>" in html[0]
    assert "Figure 3.2.</span> left, and more of it.</figcaption>" in html[1]
    assert "Figure 3.3.</span> right.</figcaption>" in html[2]
    src = 'src="../_static/figures/03_x/figure-3-3.png" width="320" height="240" loading="lazy"'
    assert src in html[2]  # at its display size, its room kept before it loads
    assert "width=" not in html[0] and 'loading="lazy"' in html[0]  # a plain PNG: its own size
    assert "base64" not in "".join(html)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.png"))
    assert files == [f"03_x/figure-3-{n}.png" for n in (1, 2, 3)]
    assert (tmp_path / "03_x" / "figure-3-3.png").read_bytes() == b"\x89PNG\r\n\x1a\n"
    assert second.outputs[0]["text"] == "hi\n"
    nbformat.validate(nb)
    bare = new_notebook(cells=[new_code_cell("plot()", outputs=[drawn[3]])])
    with pytest.raises(ValueError, match=r"1 picture.*0 `# Figure 4.n:` caption"):
        reading_cells(bare, "4")
    late = new_notebook(
        cells=[new_code_cell("# Figure 4.2: a picture.\nplot()", outputs=[drawn[3]])]
    )
    with pytest.raises(ValueError, match=r"Figure 4.2 should be numbered 4.1"):
        reading_cells(late, "4")


def test_each_chapter_gets_its_map_under_the_title():
    from tools.prepare_book import CHAPTER_PARTS, MAPS, PART_NAMES, add_map, draw_maps

    drawn = draw_maps()
    assert set(drawn) == set(CHAPTER_PARTS) and set(CHAPTER_PARTS.values()) <= set(PART_NAMES)
    for name, alt in drawn.values():
        svg = (MAPS / name).read_text()
        assert svg.lstrip().startswith("<?xml") and "masked-LM head" in svg  # text stays text
        assert "BERT-base" in alt and "where this chapter works" in alt
    nb = _chapter()
    title = nb.cells[0].source
    add_map(nb, "03", drawn)
    assert nb.cells[0].source == title and nb.cells[1].cell_type == "markdown"
    page = nb.cells[1].source
    assert page.startswith('<figure class="tfx-map"><img src="../_static/maps/03.svg" alt="A map')
    assert "Where this chapter works: multi-head attention" in page
    n = len(nb.cells)
    add_map(nb, "91", drawn)  # an appendix page: no map
    assert len(nb.cells) == n
