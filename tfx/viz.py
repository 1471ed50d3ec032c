"""Plots for the chapters. matplotlib is imported here only, so `import tfx` never needs it.

Each function takes the numbers to draw and returns the matplotlib Figure, so tests can call it headless.
"""

import matplotlib.pyplot as plt


def _token_font(tokens):
    """A font that has every glyph of the tokens (the default DejaVu Sans has no CJK), or None."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    chars = {ord(c) for t in tokens for c in t}
    default = font_manager.findfont(font_manager.FontProperties())
    for path in [default] + [f.fname for f in font_manager.fontManager.ttflist]:
        if "LastResort" in path:  # maps every code point to a placeholder box: not a real glyph
            continue
        try:
            cmap = FT2Font(path).get_charmap()
        except (OSError, RuntimeError):
            continue
        if chars <= cmap.keys():
            return font_manager.FontProperties(fname=path)
    return None


def token_labels(tokens):
    """Tick labels and their font: the tokens themselves where a font can draw them, else "#i" for each
    token that needs a missing glyph (print the index → token table beside the figure then).
    """
    font = _token_font(tokens)
    if font is not None:
        return list(tokens), font
    return [t if t.isascii() else f"#{i}" for i, t in enumerate(tokens)], None


def attention_grid(
    weights, tokens, row_names=None, col_names=None, title: str = None, cell: float = 1.9
):
    """Heatmaps of attention weights, one row per layer and one column per head, tokens on both axes.

    weights: (n_rows, H, L, L) or (H, L, L) array-like; each panel is query (y) × key (x), on a shared 0..1
    colour scale so panels compare.
    """
    import numpy as np

    w = np.asarray(weights, dtype=float)
    if w.ndim == 3:
        w = w[None]  # (1, H, L, L)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2] or w.shape[-1] != len(tokens):
        raise ValueError(
            f"weights must be (rows, H, L, L) or (H, L, L) with L = {len(tokens)} tokens, "
            f"got shape {w.shape}"
        )
    n_rows, n_cols, L = w.shape[0], w.shape[1], w.shape[-1]
    labels, font = token_labels(tokens)
    if font is not None:
        font.set_size(
            7
        )  # fontproperties overrides fontsize=, so the size must live in the font itself
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(cell * n_cols + 0.8, cell * n_rows + 0.4), dpi=80, squeeze=False
    )
    for r in range(n_rows):
        for c in range(n_cols):
            ax = axes[r, c]
            im = ax.imshow(w[r, c], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_xticks(range(L), labels, rotation=90, fontsize=7, fontproperties=font)
            for tick in ax.get_xticklabels():
                tick.set_rotation(
                    0 if len(tick.get_text()) == 1 else 90
                )  # one CJK glyph reads upright
            ax.set_yticks(range(L), labels, fontsize=7, fontproperties=font)
            if c > 0:
                ax.set_yticklabels([])
            ax.set_title(col_names[c] if col_names else f"head {c}", fontsize=8)
            if c == 0 and row_names:
                ax.set_ylabel(row_names[r], fontsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_curves(
    x,
    curves: dict,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    vlines: dict = None,
    marker: str = None,
    figsize=(6, 3.5),
):
    """Several named curves against one x, with labelled vertical markers (e.g. a crossover point).

    On log-log axes a power law y ∝ x^k is a straight line of slope k (timings against length); marker="o"
    shows the measured points themselves.
    """
    fig, ax = plt.subplots(figsize=figsize, dpi=90)
    for name, y in curves.items():
        ax.plot(x, y, label=name, marker=marker)
    for name, xv in (vlines or {}).items():
        ax.axvline(xv, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            name,
            (xv, 0.95),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
        )
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    if logx:  # label the measured x values themselves, not powers of ten
        ax.set_xticks(list(x), [str(v) for v in x])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_pe(pe, position: int = None, dim: int = None, figsize=(8, 3)):
    """Heatmap of a (positions, dims) encoding; given position and dim, a crosshair there and, beside it,
    that dim's sinusoid against position with the chosen entry marked."""
    pe = pe.detach().cpu().numpy() if hasattr(pe, "detach") else pe
    pick = position is not None and dim is not None
    fig, axes = plt.subplots(
        1,
        2 if pick else 1,
        figsize=figsize,
        dpi=90,
        squeeze=False,
        gridspec_kw={"width_ratios": [2, 1] if pick else [1]},
    )
    ax = axes[0, 0]
    im = ax.imshow(pe, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel="dimension", ylabel="position", title="sinusoidal PE")
    fig.colorbar(im, ax=ax, fraction=0.05)
    if pick:
        ax.axhline(position, color="lime", linewidth=1.2)
        ax.axvline(dim, color="lime", linewidth=1.2)
        ax2 = axes[0, 1]
        ax2.plot(pe[:, dim], range(len(pe)), color="tab:blue")
        ax2.plot(pe[position, dim], position, "o", color="k")
        ax2.invert_yaxis()
        ax2.set(xlabel=f"PE[:, {dim}]", ylabel="position", xlim=(-1.1, 1.1), title=f"dim {dim}")
    fig.tight_layout()
    return fig
