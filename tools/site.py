"""Sphinx extension: how the site's pages read and what they weigh (issue 46).

- Code lines: Pygments writes each line of a code block in its own `<span class="tfx-line">`
  carrying the line's indent (`--i`), so that book/_assets/tfx-book.css can wrap a long line with a
  hanging indent (its continuation starts four columns right of the line's own indent) instead of
  in column 0, where a wrapped comment read as code.
- Search excerpts: the search page cuts each result's excerpt from `_static/tfx-excerpts.js`,
  written here from the prose of every section (no code, outputs, contents lists or raw HTML),
  its maths as plain text (`plain_maths`: "QKᵀ/√d_k", never half-stripped TeX). The page reads
  it as a script, so search works the same from file://, where Sphinx's own excerpts fetched
  every result's page and a browser refuses each fetch (about 70 console errors per query).
- Page weight: a page loads no script it does not use. Font Awesome's 1.45 MB script goes (the
  theme's stylesheet draws the same icons from its web font); the search index and Sphinx's
  search code load on the search page only (the theme loads them everywhere for a search-as-you-
  type box this site does not turn on); and _static keeps no file that no page loads (the
  ipywidgets manager where no page holds a saved widget, source maps).
"""

import html
import json
import re
from pathlib import Path

from docutils import nodes
from pygments.formatters import HtmlFormatter

TAG = re.compile(r"<[^>]*>")
# After a `.` or an opening bracket a line may break: `a.b.C(d.e(` chains hold no space, and
# one longer than the column (`transformers.BertModel(transformers.BertConfig(...))`) would
# otherwise scroll. <wbr> adds no text, so what the copy button copies is unchanged.
BREAKABLE = re.compile(r'<span class="[op]">(?:\.|\(|\[|\(\))</span>')


class LineFormatter(HtmlFormatter):
    """Pygments' HTML formatter, each source line wrapped in `<span class="tfx-line">`, with
    `style="--i:N"` when it starts with N spaces, and a break opportunity (`<wbr>`) after each
    `.` and opening bracket. The newline stays outside the span, so the
    block's text (what the copy button copies) is unchanged."""

    def wrap(self, source):
        return super().wrap(self._lines(source))

    def _lines(self, source):
        for is_line, piece in source:
            body = piece.removesuffix(self.lineseparator)
            if not is_line or not body:
                yield is_line, piece
                continue
            text = html.unescape(TAG.sub("", body))
            indent = len(text) - len(text.lstrip(" "))
            style = f' style="--i:{indent}"' if indent else ""
            body = BREAKABLE.sub(r"\g<0><wbr>", body)
            yield is_line, f'<span class="tfx-line"{style}>{body}</span>{self.lineseparator}'


# ---------------------------------------------------------------------------------------------
# Maths as plain text

SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε",
    "eta": "η", "theta": "θ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ", "phi": "φ",
    "varphi": "φ", "omega": "ω", "Phi": "Φ", "partial": "∂", "ell": "ℓ", "nabla": "∇",
    "sum": "Σ", "infty": "∞", "dots": "…", "ldots": "…", "top": "ᵀ", "lVert": "‖",
    "rVert": "‖", "langle": "⟨", "rangle": "⟩", "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊",
    "rfloor": "⌋",
}  # fmt: skip
RELATIONS = {
    "cdot": "·", "times": "×", "odot": "⊙", "pm": "±", "approx": "≈", "propto": "∝",
    "in": "∈", "le": "≤", "ge": "≥", "ne": "≠", "neq": "≠", "mid": "|", "to": "→",
    "leftarrow": "←", "mapsto": "↦", "quad": "", "qquad": "",
}  # fmt: skip
WORDS = {"cos", "sin", "tanh", "log", "ln", "exp", "max", "min"}
DROPPED = {"left", "right", "big", "bigl", "bigr", "Big", "textstyle", "displaystyle"}
FONTS = "text|mathrm|operatorname|mathbf|mathcal|mathsf|mathit|mathbb|boldsymbol"
ACCENTS = {"hat": "\u0302", "bar": "\u0304", "tilde": "\u0303", "overline": "\u0305"}
BLACKBOARD = {"R": "ℝ", "N": "ℕ", "Z": "ℤ"}
OPERATOR = re.compile(r"[ +\-−*/·×=]")


def _group(text: str) -> str:
    """A fraction's or a root's argument, in parentheses when it holds an operator."""
    return f"({text.strip()})" if OPERATOR.search(text.strip()) else text.strip()


def _symbol(m) -> str:
    name = m[1]
    if name in SYMBOLS:
        return SYMBOLS[name]
    if name in RELATIONS:
        return f" {RELATIONS[name]} "
    if name in WORDS:
        return f"{name} "
    return "" if name in DROPPED else m[0]  # a command that takes an argument: later


# innermost first: each pass applies the first rule that matches, then starts again, so a bare
# group's braces go only once nothing inside them is left to read
RULES = [
    (r"\\t?frac\{([^{}]*)\}\{([^{}]*)\}", lambda m: f"{_group(m[1])}/{_group(m[2])}"),
    (r"\\sqrt\s*\{([^{}]*)\}", lambda m: f"√{_group(m[1])}"),
    (r"\\sqrt\s*([A-Za-z0-9])", lambda m: f"√{m[1]}"),
    (r"\\mathbb\{([^{}]*)\}", lambda m: BLACKBOARD.get(m[1], m[1])),
    (rf"\\(?:{FONTS})\{{([^{{}}]*)\}}", lambda m: m[1]),
    (
        r"\\(hat|bar|tilde|overline)\{([^{}]*)\}",
        lambda m: m[2] + ACCENTS[m[1]] if len(m[2]) == 1 else m[2],
    ),
    (r"\^\{\s*T\s*\}|\^T\b", lambda m: "ᵀ"),
    (r"([\^_])\{([^{}]*)\}", lambda m: m[1] + _group(m[2])),
    (r"\{([^{}]*)\}", lambda m: m[1]),
]


def plain_maths(tex: str) -> str:
    """TeX as plain text for a search excerpt: `QK^{\\mathsf T}/\\sqrt{d_k}` -> `QKᵀ/√d_k`."""
    text = re.sub(r"\\begin\{[^{}]*\}|\\end\{[^{}]*\}", " ", tex)
    text = text.replace("\\\\", "; ").replace("\\|", "‖").replace("\\%", "%")
    text = text.replace("\\!", "")
    text = re.sub(r"\\[,;: ]", " ", text)
    text = re.sub(rf"\\({FONTS})\s+([A-Za-z0-9])", r"\2", text)  # \mathsf T
    text = re.sub(r"\\([A-Za-z]+)\s*", _symbol, text)
    while True:
        for pattern, replace in RULES:
            text, n = re.subn(pattern, replace, text, count=1)
            if n:
                break
        else:
            break
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)  # anything left: its name, no backslash
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Search excerpts

EXCERPTS = "tfx-excerpts.js"  # under _static, loaded by the search page only
SKIPPED = (nodes.literal_block, nodes.raw, nodes.topic, nodes.comment, nodes.system_message)


def _prose(node) -> str:
    """A paragraph's words, its maths as plain text."""
    if isinstance(node, nodes.math):
        return plain_maths(node.astext())
    if isinstance(node, nodes.Text):
        return node.astext()
    return "".join(_prose(child) for child in node.children)


def _is_cell(node) -> bool:
    return isinstance(node, nodes.container) and "cell" in node.get("classes", [])


def excerpts(doctree) -> list:
    """[[section id, its title, its prose]] of a page, in order: the paragraphs each section holds
    itself (not its subsections'), without code cells and their outputs, literal blocks, raw HTML
    or contents lists."""
    found = []

    def walk(node, here):
        if isinstance(node, SKIPPED) or _is_cell(node):
            return
        if isinstance(node, nodes.section):
            title = node.next_node(nodes.title)
            here = [node["ids"][0] if node["ids"] else "", _prose(title) if title else "", []]
            found.append(here)
        elif isinstance(node, nodes.paragraph) and here is not None:
            here[2].append(" ".join(_prose(node).split()))
            return
        for child in node.children:
            walk(child, here)

    walk(doctree, None)
    return [[i, title, " ".join(p for p in paragraphs if p)] for i, title, paragraphs in found]


def _collect(app, doctree, docname) -> None:
    if app.builder.format == "html":
        app.env.tfx_excerpts = getattr(app.env, "tfx_excerpts", {})
        app.env.tfx_excerpts[docname] = excerpts(doctree)


def _write_excerpts(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    data = json.dumps(getattr(app.env, "tfx_excerpts", {}), ensure_ascii=False)
    out = Path(app.outdir) / "_static" / EXCERPTS
    out.write_text(f"window.tfxExcerpts = {data};\n", encoding="utf-8")


def _search_page(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file(EXCERPTS, priority=400)


# ---------------------------------------------------------------------------------------------
# Page weight


def _script_tag(src: str):
    """A `<script … src="…src[?digest]">` tag, with its line."""
    return re.compile(rf'[ \t]*<script\b[^>]*\bsrc="[^"]*{re.escape(src)}(?:\?[^"]*)?"[^>]*>'
                      r"</script>[ \t]*\n?")  # fmt: skip


UNUSED_SCRIPTS = [_script_tag("_static/scripts/fontawesome.js")]
SEARCH_ONLY = [
    _script_tag(s) for s in ("_static/searchtools.js", "_static/language_data.js", "searchindex.js")
]
# the ipywidgets manager and its icon fonts (tools/prepare_book.py, VENDOR), under _static: kept
# only when a page still loads it (tools/static_widgets.py adds it to a page with a saved widget)
MANAGER = ("require.min.js", "tfx-offline.js", "embed-amd.js", "*.woff", "*.woff2")


def lighten(page: str, search_page: bool) -> str:
    """A page's HTML without the script tags it does not need."""
    for tag in UNUSED_SCRIPTS + ([] if search_page else SEARCH_ONLY):
        page = tag.sub("", page)
    return page


def _lighten(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    pages = {}
    for path in out.rglob("*.html"):
        pages[path] = lighten(path.read_text(encoding="utf-8"), path == out / "search.html")
        path.write_text(pages[path], encoding="utf-8")
    static = out / "_static"
    unused = [static / "scripts" / f"fontawesome.js{end}" for end in ("", ".LICENSE.txt")]
    if not any("embed-amd.js" in page for page in pages.values()):
        unused += [f for pattern in MANAGER for f in static.glob(pattern)]
    for f in unused + list(static.rglob("*.map")):
        f.unlink(missing_ok=True)


def _use_line_formatter(app) -> None:
    highlighter = getattr(app.builder, "highlighter", None)
    if highlighter is not None and highlighter.dest == "html":
        highlighter.formatter = LineFormatter


def setup(app):
    app.connect("builder-inited", _use_line_formatter)
    app.connect("doctree-resolved", _collect)
    app.connect("html-page-context", _search_page)
    app.connect("build-finished", _write_excerpts)
    app.connect("build-finished", _lighten)
    # the excerpts are gathered while the pages are written, in this process
    return {"parallel_read_safe": True, "parallel_write_safe": False}
