"""Show the source of a tfx function or class in a notebook, highlighted, read from the package
itself.

A textbook shows the code it teaches. Printing the installed source (instead of pasting a copy into
the chapter) means the page can never drift from the code that the tests check.
"""

import inspect
import textwrap


def source_text(obj) -> str:
    """The source of a function, method, class or module, as text (dedented)."""
    if not (
        inspect.isfunction(obj)
        or inspect.ismethod(obj)
        or inspect.isclass(obj)
        or inspect.ismodule(obj)
    ):
        raise TypeError(
            f"obj must be a function, method, class or module, got {type(obj).__name__}: {obj!r}"
        )
    return _dedent(inspect.getsource(obj))


def _dedent(text: str) -> str:
    return textwrap.dedent(text).rstrip() + "\n"


class Source:
    """Displays as highlighted HTML in Jupyter and as plain text elsewhere (nbval compares the
    text)."""

    def __init__(self, obj):
        self.name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
        self.module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
        self.text = source_text(obj)

    def __repr__(self) -> str:
        return f"# {self.module}.{self.name}\n{self.text}"

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        formatter = HtmlFormatter(nowrap=False, style="default", noclasses=True)
        title = (
            f"<div style='font-size:85%;color:#555'><code>{self.module}.{self.name}</code></div>"
        )
        return title + highlight(self.text, PythonLexer(), formatter)


def show_source(*objs):
    """Display the source of each object, highlighted (the last expression of a cell shows it)."""
    if not objs:
        raise ValueError("show_source needs at least one function, class or module")
    from IPython.display import display

    for obj in objs:
        display(Source(obj))
