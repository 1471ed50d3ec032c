"""tools/site.py, the site's Sphinx extension: code lines carry their indent for the hanging
indent, search excerpts hold prose with plain-text maths, and pages lose the scripts they do not
use (issue 46). The browser tests (tests/browser/test_site.py) check the built pages."""

import re

import pytest
from docutils import nodes
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from tools import site


def test_each_code_line_is_a_span_with_its_indent():
    code = 'def f(x):\n    return 1.1e-06  # a < b\n\n        y = """two\nlines"""\n'
    out = highlight(code, PythonLexer(), site.LineFormatter())
    lines = re.findall(r'<span class="tfx-line"( style="--i:(\d+)")?>', out)
    assert [int(n or 0) for _, n in lines] == [0, 4, 8, 0]  # the blank line has no span
    plain = highlight(code, PythonLexer(), HtmlFormatter())
    assert re.sub(r"<[^>]*>", "", out) == re.sub(r"<[^>]*>", "", plain)  # the same text to copy
    assert '<span class="mf">1.1e-06</span>' in out  # the number stays one token


@pytest.mark.parametrize(
    "tex, plain",
    [
        (r"QK^{\mathsf T}/\sqrt{d_k}", "QKᵀ/√d_k"),
        (r"\operatorname{diag}(p) - pp^{\mathsf T}", "diag(p) - ppᵀ"),
        (r"\frac{\partial \ell}{\partial S_{ij}}", "∂ℓ/∂S_ij"),
        (
            r"\mathrm{softmax}\!\left(\frac{QK^{\mathsf T}}{\sqrt{d_k}}\right)V",
            "softmax(QKᵀ/√d_k)V",
        ),
        (r"W \in \mathbb{R}^{d \times d}", "W ∈ ℝ^(d × d)"),
        (r"\text{if } i \le j", "if i ≤ j"),
        (r"\bar{x}", "x̄"),
    ],
)
def test_plain_maths(tex, plain):
    assert site.plain_maths(tex) == plain
    assert "\\" not in site.plain_maths(tex) and "{" not in site.plain_maths(tex)


def _page():
    """A page: a title, prose with maths, a code cell, a contents list, raw HTML, a subsection."""
    doc = nodes.document(None, None)
    top = nodes.section(ids=["attention"])
    top += nodes.title(text="Attention")
    top += nodes.paragraph("", "", nodes.Text("Scores are "), nodes.math(text=r"QK^{\mathsf T}"))
    cell = nodes.container(classes=["cell"])
    cell += nodes.literal_block(text="from tfx.model import attention")
    top += cell
    top += nodes.topic("", nodes.paragraph(text="Contents One head by hand"))
    top += nodes.raw(text="<figure>picture</figure>", format="html")
    sub = nodes.section(ids=["one-head"])
    sub += nodes.title(text="One head")
    sub += nodes.paragraph(text="A head   attends.")
    top += sub
    doc += top
    return doc


def test_excerpts_hold_prose_only():
    assert site.excerpts(_page()) == [
        ["attention", "Attention", "Scores are QKᵀ"],
        ["one-head", "One head", "A head attends."],
    ]


def test_lighten_drops_unused_scripts():
    page = (
        "<head>\n"
        '    <script defer src="../_static/scripts/fontawesome.js?digest=55c2"></script>\n'
        '    <script src="../_static/searchtools.js"></script>\n'
        '    <script src="../_static/language_data.js"></script>\n'
        '    <script src="../searchindex.js"></script>\n'
        '    <script src="../_static/tfx-search.js?v=1"></script>\n'
        "</head>"
    )
    light = site.lighten(page, search_page=False)
    assert light == '<head>\n    <script src="../_static/tfx-search.js?v=1"></script>\n</head>'
    on_search = site.lighten(page, search_page=True)
    assert "searchindex.js" in on_search and "fontawesome" not in on_search
