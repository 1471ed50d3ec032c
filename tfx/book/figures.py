"""How a chapter's figures reach the page: sharp on a high-density screen, and readable at the size
the site shows them.

A figure shown in a notebook is stored as a PNG; the site puts that PNG in a text column about
COLUMN_PX pixels wide and scales down anything wider. Two things went wrong before this module (site
review F6): the PNGs were drawn at one pixel per CSS pixel, so they blurred on any high-density
screen, and a wide figure of 9-point labels shrank into 6-pixel text that nobody can read.

`book_figures()` fixes both for every figure a kernel displays, whoever drew it:
- figures are stored as "retina" PNGs (twice the pixels, with the display size in the output's
  metadata), so the site and JupyterLab show them at their natural size with sharp text;
- before a figure is stored, `smallest_text_px` measures its smallest visible text at the size the
  site will show it; below MIN_TEXT_PX a warning goes into the cell's output, where
  tests/test_notebook_hygiene.py finds it, so an unreadable figure cannot be committed unnoticed.
"""

import warnings

COLUMN_PX = 780  # the site's text column at desktop width: a wider picture is scaled down to it
MIN_TEXT_PX = 12.0  # the smallest text a figure may show on the page (9 pt in CSS pixels)
TOO_SMALL = "text too small on the page"  # the warning's words, which the hygiene test looks for


def smallest_text_px(fig) -> tuple:
    """(pixels, text): the height in CSS pixels of the smallest visible text of `fig` (its font
    size in points at the figure's dpi) once the site has scaled the picture to fit COLUMN_PX; and
    that text. (inf, "") for a figure without text."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_tightbbox(renderer).width * fig.dpi  # what bbox_inches="tight" stores
    scale = min(1.0, COLUMN_PX / width_px)
    texts = [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and _inside(t, fig, renderer)
    ]
    if not texts:
        return float("inf"), ""
    smallest = min(texts, key=lambda t: t.get_fontsize())
    return smallest.get_fontsize() * fig.dpi / 72 * scale, smallest.get_text()


def _inside(text, fig, renderer) -> bool:
    """Whether any of the text lies on the figure (tick labels beyond an axis's limits are kept
    invisible by matplotlib only at draw time)."""
    box = text.get_window_extent(renderer)
    return box.width > 0 and box.overlaps(fig.bbox)


def check_legible(fig) -> None:
    """Warn (UserWarning, in the cell's output) when the figure's smallest text would show below
    MIN_TEXT_PX on the page."""
    px, text = smallest_text_px(fig)
    if px < MIN_TEXT_PX:
        warnings.warn(
            f"{TOO_SMALL}: {text[:40]!r} would show {px:.1f} px high (at least {MIN_TEXT_PX:g}): "
            f"use a larger font or a narrower figure (the column is {COLUMN_PX} px)",
            stacklevel=2,
        )


def book_figures() -> bool:
    """In an IPython kernel with the inline backend: store every displayed figure as a retina PNG,
    checked by check_legible first. Idempotent; False (and nothing changed) outside IPython."""
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["image/png"]
    current = formatter.lookup_by_type(Figure) if Figure in formatter.type_printers else None
    if getattr(current, "tfx_book", False):
        return True
    set_matplotlib_formats("retina")
    retina = formatter.lookup_by_type(Figure)

    def checked_retina(fig, *args, **kwargs):
        check_legible(fig)
        return retina(fig, *args, **kwargs)

    checked_retina.tfx_book = True
    formatter.for_type(Figure, checked_retina)
    return True
