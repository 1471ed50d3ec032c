"""Plots for the chapters. matplotlib is imported here only, so `import tfx` never needs it.

Each function takes the numbers to draw and returns the matplotlib Figure, so tests can call it
headless.
"""

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from tfx.book.figures import book_figures

# The CJK font the stored outputs were drawn with (Debian: fonts-wqy-microhei); preferred when
# several CJK fonts are installed, so a chapter draws the same figure on every machine that has it.
PREFERRED_FONT_FILES = ("wqy-microhei",)


def font_files() -> list:
    """Font files to try for token labels, in a fixed order: matplotlib's default font, then the
    preferred CJK fonts (PREFERRED_FONT_FILES), then every other font matplotlib knows, sorted by
    path.

    matplotlib caches its font list (~/.cache/matplotlib): a font installed after that cache was
    written appears here only once the cache is deleted.
    """
    from matplotlib import font_manager

    default = font_manager.findfont(font_manager.FontProperties())
    known = sorted({f.fname for f in font_manager.fontManager.ttflist} - {default})
    preferred = [p for key in PREFERRED_FONT_FILES for p in known if key in Path(p).name]
    return [default] + preferred + [p for p in known if p not in preferred]


def _charmap(path) -> set:
    """The code points a font file draws; empty when the file cannot be read."""
    from matplotlib.ft2font import FT2Font

    if "LastResort" in str(path):  # maps every code point to a placeholder box: not a real glyph
        return set()
    try:
        return set(FT2Font(str(path)).get_charmap())
    except (OSError, RuntimeError):
        return set()


def _token_font(tokens, candidates=None):
    """The first font file of `candidates` (default: font_files()) that has every glyph of the
    tokens (matplotlib's default DejaVu Sans has no CJK), as FontProperties; None when none has."""
    from matplotlib import font_manager

    chars = {ord(c) for t in tokens for c in t}
    for path in font_files() if candidates is None else candidates:
        if chars <= _charmap(path):
            return font_manager.FontProperties(fname=str(path))
    return None


def use_cjk_fallback() -> str:
    """Put a CJK font behind matplotlib's default sans-serif font, so any text in any plot (an axis
    label such as "hidden activation of 苹") draws its Chinese characters from it, glyph by glyph,
    where DejaVu Sans has none (matplotlib >= 3.6 falls back through the font.family list).
    Called when tfx.book.viz is imported. Latin text still draws in DejaVu Sans, so figures without
    Chinese do not change. Returns the family added, or "" when no installed font has 苹果."""
    from matplotlib import font_manager

    font = _token_font(["我喜欢吃苹果"], font_files()[1:])  # a font other than the default
    if font is None:
        return ""
    path = font.get_file()
    font_manager.fontManager.addfont(path)
    family = font_manager.FontProperties(fname=path).get_name()
    families = list(plt.rcParams["font.family"])
    if family not in families:  # the fallback is the family list: each entry resolves to one font
        plt.rcParams["font.family"] = families + [family]
    return family


def _arrow(ax, a, b, scale: float = 9, **style):
    """An arrow from point a to point b, as the diagrams draw their data flow."""
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=scale, **style))


def _box(ax, corner, w, h, pad: float, **style):
    """A rounded box (a block of a diagram), its lower-left corner at `corner`."""
    ax.add_patch(FancyBboxPatch(corner, w, h, boxstyle=f"round,pad={pad}", **style))


def token_labels(tokens, candidates=None):
    """Tick labels and their font: the tokens themselves where a font can draw them, else "#i" for
    each token that needs a missing glyph (print the index → token table beside the figure then) and
    None.
    candidates: font files to try (default: font_files()).
    """
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens must be a list of strings, got {tokens!r}")
    if candidates is not None and (
        isinstance(candidates, str) or not all(isinstance(c, (str, Path)) for c in candidates)
    ):
        raise TypeError(f"candidates must be a list of font file paths, got {candidates!r}")
    font = _token_font(tokens, candidates)
    if font is not None:
        return list(tokens), font
    return [t if t.isascii() else f"#{i}" for i, t in enumerate(tokens)], None


def attention_grid(
    weights, tokens, row_names=None, col_names=None, title: str = None, cell: float = 1.9
):
    """Heatmaps of attention weights, one row per layer and one column per head, tokens on both
    axes.

    weights: (n_rows, H, L, L) or (H, L, L) array-like; each panel is query (y) × key (x), on a
    shared 0..1 colour scale so panels compare.
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
    # fontproperties overrides fontsize= (even fontproperties=None resets it to 10 pt), so it is
    # passed only when a font was found, and then the size lives in the font itself
    font_kw = {}
    if font is not None:
        font.set_size(9)
        font_kw = {"fontproperties": font}
    cell = min(cell, 6.8 / n_cols)  # the figure fits the page's column, so labels keep 9 pt there
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(cell * n_cols + 0.8, cell * n_rows + 0.4), squeeze=False
    )
    for r in range(n_rows):
        for c in range(n_cols):
            ax = axes[r, c]
            im = ax.imshow(w[r, c], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_xticks(range(L), labels, rotation=90, fontsize=9, **font_kw)
            for tick in ax.get_xticklabels():
                tick.set_rotation(
                    0 if len(tick.get_text()) == 1 else 90
                )  # one CJK glyph reads upright
            ax.set_yticks(range(L), labels, fontsize=9, **font_kw)
            if c > 0:
                ax.set_yticklabels([])
            ax.set_title(col_names[c] if col_names else f"head {c}", fontsize=9)
            if c == 0:  # rows are queries, columns are keys (claim A42)
                ax.set_ylabel(f"{row_names[r]}\nquery" if row_names else "query", fontsize=9)
            if r == n_rows - 1:
                ax.set_xlabel("key", fontsize=9)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
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

    On log-log axes a power law y ∝ x^k is a straight line of slope k (timings against length);
    marker="o" shows the measured points themselves.
    """
    fig, ax = plt.subplots(figsize=figsize)
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
            fontsize=9,
        )
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    if logx:  # label the measured x values themselves, not powers of ten
        ax.set_xticks(list(x), [str(v) for v in x])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.legend(fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def two_over_one(height: float = 5.8):
    """(fig, [top left, top right, bottom]): three panels that fit the page's column, two side by
    side over one as wide as both, for a figure that would otherwise be three panels in a row
    (13 inches wide: the page shrank its labels to 6 pixels)."""
    if isinstance(height, bool) or not isinstance(height, (int, float)) or not height > 0:
        raise ValueError(f"height must be a positive number of inches, got {height!r}")
    fig = plt.figure(figsize=(7.6, height))
    grid = fig.add_gridspec(2, 2)
    return fig, [
        fig.add_subplot(grid[0, 0]),
        fig.add_subplot(grid[0, 1]),
        fig.add_subplot(grid[1, :]),
    ]


def plot_pe(pe, position: int = None, dim: int = None, figsize=(7.6, 3)):
    """Heatmap of a (positions, dims) encoding; given position and dim, a crosshair there and,
    beside it, that dim's sinusoid against position with the chosen entry marked."""
    pe = pe.detach().cpu().numpy() if hasattr(pe, "detach") else pe
    pick = position is not None and dim is not None
    fig, axes = plt.subplots(
        1,
        2 if pick else 1,
        figsize=figsize,
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


def _head_split_stages(mha, L: int, B: int) -> tuple:
    """d_k and the eight stages of plot_head_split, each (label, shape, how to draw it): the shapes
    are what the module's own split_heads / merge_heads return for a zero input of length L."""
    import torch

    x = torch.zeros(B, L, mha.d_model)  # (B, L, d_model)
    heads = mha.split_heads(x)  # (B, H, L, d_k)
    d_k = heads.size(-1)
    viewed = (B, L, mha.n_heads, d_k)  # the view inside split_heads, before its transpose
    scores = heads @ heads.transpose(-2, -1)  # (B, H, L, L)
    merged = mha.merge_heads(heads)  # (B, L, d_model)
    return d_k, [
        ("x", tuple(x.shape), "flat"),
        ("q = x W_Q", tuple(x.shape), "bands"),
        (".view(B, L, H, d_k)", viewed, "gaps"),
        (".transpose(1, 2)", tuple(heads.shape), "stack"),
        ("softmax(q kᵀ / √d_k)", tuple(scores.shape), "square"),
        ("weights @ v", tuple(heads.shape), "stack"),
        ("merge: transpose, reshape", tuple(merged.shape), "bands"),
        ("out = concat W_O", tuple(merged.shape), "flat"),
    ]


def _draw_stage(ax, title: str, shape: tuple, kind: str, H: int):
    """One panel of plot_head_split, its shape printed below. kind: "flat" one grey block;
    "bands" one coloured column band per head ("gaps": with gaps, once .view has split them);
    "stack" / "square" one (L, d_k) / (L, L) panel per head, stacked like cards."""
    colours = plt.get_cmap("tab20")
    ax.set_xlim(0, 1.25)
    ax.set_ylim(-0.05, 1.3)
    ax.invert_yaxis()
    ax.axis("off")
    ax.set_title(title, fontsize=9)
    ax.text(0.6, 1.27, str(shape), ha="center", va="bottom", fontsize=9, family="monospace")
    if kind == "flat":
        ax.add_patch(Rectangle((0.1, 0.1), 1.0, 0.9, color="0.75"))
    elif kind in ("bands", "gaps"):
        gap = 0.02 if kind == "gaps" else 0.0
        w = (1.0 - gap * (H - 1)) / H
        for h in range(H):
            ax.add_patch(Rectangle((0.1 + h * (w + gap), 0.1), w, 0.9, color=colours(h % 20)))
    else:  # "stack" / "square": one panel per head, stacked like cards
        step = 0.25 / max(H - 1, 1)
        width = 0.75 if kind == "square" else 0.45  # (L, L) panels, or narrower (L, d_k) ones
        for h in reversed(range(H)):
            ax.add_patch(
                Rectangle(
                    (0.1 + h * step, 0.1 + h * step * 0.6),
                    width,
                    0.75,
                    facecolor=colours(h % 20),
                    edgecolor="white",
                    linewidth=0.6,
                )
            )


def plot_head_split(mha, L: int = 8, B: int = 1, figsize=(7.6, 4.6)):
    """The head split and merge of a tfx MultiHeadAttention, drawn from the module itself:
    (B, L, d) → view (B, L, H, d_k) → transpose (B, H, L, d_k) → scores (B, H, L, L) → context
    (B, H, L, d_k) → transpose back and reshape to (B, L, d) → W_O.

    Every shape printed is the shape the module's own split_heads / merge_heads return for a zero
    input of length L, so the figure cannot drift from the code. Colours mark the heads: the
    column bands of q become separate (L, d_k) panels, and merge puts them back side by side.
    The eight stages sit in two rows of four, read like text, so that their labels stay at 9 pt
    when the page shrinks the figure to its column (one row of eight had 6-pixel labels).
    """
    if not all(hasattr(mha, a) for a in ("d_model", "n_heads", "d_k", "split_heads")):
        raise TypeError(f"mha must be a tfx MultiHeadAttention, got {type(mha).__name__}")
    if not (isinstance(L, int) and isinstance(B, int) and L >= 1 and B >= 1):
        raise ValueError(f"L and B must be integers >= 1, got L={L!r}, B={B!r}")
    d, H = mha.d_model, mha.n_heads
    d_k, stages = _head_split_stages(mha, L, B)
    fig, axes = plt.subplots(2, len(stages) // 2, figsize=figsize)
    for n, (ax, (label, shape, kind)) in enumerate(zip(axes.ravel(), stages), start=1):
        _draw_stage(ax, f"{n}. {label}", shape, kind, H)
    fig.suptitle(
        f"split and merge of {H} heads: d_model = {d}, d_k = {d_k}, L = {L}, B = {B}", fontsize=10
    )
    fig.tight_layout()
    return fig


def wiring_blocks(norm_first) -> list:
    """The encoder layer's blocks from input to output as the flag wires them ("+": a residual sum).

    post-LN (norm_first False): attention, +, LayerNorm, feed-forward, +, LayerNorm;
    pre-LN (norm_first True): LayerNorm, attention, +, LayerNorm, feed-forward, +.
    """
    if not isinstance(norm_first, bool):
        raise TypeError(
            f"norm_first must be a bool, got {type(norm_first).__name__}: {norm_first!r}"
        )
    sub = [("attention", "multi-head attention"), ("ffn", "feed-forward")]
    blocks = []
    for _, name in sub:
        blocks += ["LayerNorm", name, "+"] if norm_first else [name, "+", "LayerNorm"]
    return blocks


def _residual_sum(ax, start: float, y: float):
    """The "+" at height y, and the residual path into it: it leaves the stream at `start`, goes
    left of the stream, up, and back in."""
    ax.add_patch(plt.Circle((0, y), 0.2, facecolor="white", edgecolor="black"))
    ax.text(0, y, "+", ha="center", va="center", fontsize=10, label="block")
    ax.plot([0, -1.3, -1.3], [start, start, y], color="tab:blue", linewidth=1.2)
    _arrow(ax, (-1.3, y), (-0.2, y), scale=8, color="tab:blue")


def _draw_wiring(ax, norm_first: bool):
    """One panel of encoder_wiring: the blocks of wiring_blocks(norm_first) bottom to top, an
    arrow into each, and a residual path into each "+" from where that sub-layer's branch
    starts."""
    blocks = wiring_blocks(norm_first)
    ys = [1.0 + i for i in range(len(blocks))]
    top = ys[-1] + 1.0
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-0.2, top + 0.4)
    ax.axis("off")
    ax.text(0, 0.0, "x (input)", ha="center", va="center", fontsize=9)
    ax.text(0, top, "output", ha="center", va="center", fontsize=9)
    prev = 0.0
    starts = []  # y where each sub-layer's residual path leaves the stream
    for y, name in zip(ys, blocks):
        _arrow(ax, (0, prev + 0.22), (0, y - 0.22), scale=8)
        prev = y
        if name == "+":
            _residual_sum(ax, starts.pop(), y)
            continue
        opens_branch = name == "LayerNorm" if norm_first else name != "LayerNorm"
        if opens_branch:
            starts.append(y - 0.5)
        colour = "#f6d55c" if name == "LayerNorm" else "#a8d5e2"
        _box(ax, (-0.95, y - 0.2), 1.9, 0.4, pad=0.02, facecolor=colour, edgecolor="black")
        ax.text(0, y, name, ha="center", va="center", fontsize=9, label="block")
    _arrow(ax, (0, prev + 0.22), (0, top - 0.22), scale=8)


def encoder_wiring(*layers, titles=None, figsize=None):
    """Draw each encoder layer's blocks bottom to top, with its two residual paths, from the
    layer's own `norm_first` flag (a tfx EncoderLayer or an nn.TransformerEncoderLayer), so the
    figure cannot drift from the model. The residual path of each sub-layer leaves the stream where
    the sub-layer's branch starts and rejoins it at the "+"; in post-LN a LayerNorm sits on the
    stream itself, in pre-LN only inside the branch.
    """
    if not layers:
        raise ValueError("encoder_wiring needs at least one layer")
    for m in layers:
        if not isinstance(getattr(m, "norm_first", None), bool):
            raise TypeError(f"each layer needs a bool norm_first attribute, got {type(m).__name__}")
    if titles is not None and len(titles) != len(layers):
        raise ValueError(f"titles must name each of the {len(layers)} layers, got {len(titles)}")
    fig, axes = plt.subplots(
        1,
        len(layers),
        figsize=figsize or (min(2.9, 7.6 / len(layers)) * len(layers), 5.2),
        squeeze=False,
    )
    for ax, m, k in zip(axes[0], layers, range(len(layers))):
        _draw_wiring(ax, m.norm_first)
        title = titles[k] if titles else ("pre-LN" if m.norm_first else "post-LN")
        ax.set_title(f"{title} (norm_first={m.norm_first})", fontsize=9)
    fig.tight_layout()
    return fig


def drawn_blocks(fig) -> list:
    """The block labels of an encoder_wiring figure, bottom to top, one list per panel."""
    return [
        [
            t.get_text()
            for t in sorted(ax.texts, key=lambda t: t.get_position()[1])
            if t.get_label() == "block"
        ]
        for ax in fig.axes
    ]


def _finite_or_nan(values):
    import numpy as np

    v = np.asarray(values, dtype=float)
    return np.where(np.isfinite(v), v, np.nan)


def plot_stack_activations(probe, figsize=(7.6, 3.2)):
    """Chapter 05's plot of a tfx.inspect.stack.StackProbe: per-layer mean and std of the residual
    stream.

    std is on a log axis (it spans many decades without LayerNorm); overflowed values are left out
    and the title says so.
    """
    import numpy as np

    from tfx.inspect.stack import describe

    layers = np.arange(len(probe.act_std))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=figsize)
    a1.plot(layers, _finite_or_nan(probe.act_mean), marker=".", color="tab:orange")
    a1.axhline(0, color="grey", linewidth=0.8)
    a1.set_yscale("symlog", linthresh=1e-2)
    a1.set(xlabel="layer (0 = embedding)", ylabel="mean of x_l", title="mean")
    std = _finite_or_nan(probe.act_std)
    a2.plot(layers, np.where(std > 0, std, np.nan), marker=".", color="tab:blue")
    a2.set_yscale("log")
    a2.set(xlabel="layer (0 = embedding)", ylabel="std of x_l", title="std")
    for ax in (a1, a2):
        ax.grid(True, alpha=0.3)
    note = "" if probe.finite else " · overflow: inf / n/a values not drawn"
    fig.suptitle(describe(probe.config) + note, fontsize=9)
    fig.tight_layout()
    return fig


def plot_stack_grads(probe, figsize=(6, 3.2)):
    """Chapter 06's plot of a tfx.inspect.stack.StackProbe: per-layer gradient norms on a log
    axis."""
    import numpy as np

    from tfx.inspect.stack import describe

    layers = np.arange(1, len(probe.grad_norm) + 1)
    fig, ax = plt.subplots(figsize=figsize)
    for values, name in (
        (probe.grad_norm, "‖∂loss/∂θ‖ of layer l"),
        (probe.input_grad_norm, "‖∂loss/∂x‖ at layer l's input"),
    ):
        v = _finite_or_nan(values)
        ax.plot(layers, np.where(v > 0, v, np.nan), marker=".", label=name)
    ax.set_yscale("log")
    ax.set(xlabel="layer", ylabel="gradient norm")
    note = "" if probe.finite else " · overflow: inf / n/a values not drawn"
    ax.set_title(describe(probe.config) + note, fontsize=9)
    ax.legend(fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def ffn_diagram(d_model: int, d_ff: int, activation: str = "gelu", figsize=(6, 2.6)):
    """The feed-forward block drawn from its sizes: d_model → d_ff → d_model, each bar's height
    proportional to its width, so the 4× expansion is visible at a glance."""
    for name, v in (("d_model", d_model), ("d_ff", d_ff)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    fig, ax = plt.subplots(figsize=figsize)
    top = max(d_model, d_ff)
    bars = [
        (0.0, d_model, f"x\n{d_model}"),
        (2.0, d_ff, f"xW₁ + b₁\n{d_ff}"),
        (4.0, d_ff, f"{activation}(·)\n{d_ff}"),
        (6.0, d_model, f"·W₂ + b₂\n{d_model}"),
    ]
    for xpos, size, label in bars:
        h = size / top
        ax.add_patch(Rectangle((xpos, 0.5 - h / 2), 0.6, h, color="tab:blue", alpha=0.6))
        ax.text(xpos + 0.3, -0.12, label, ha="center", va="top", fontsize=9)
    arrows = [
        (0.6, 2.0, f"W₁ ({d_model}×{d_ff})"),
        (2.6, 4.0, ""),
        (4.6, 6.0, f"W₂ ({d_ff}×{d_model})"),
    ]
    for a, b, label in arrows:
        ax.annotate("", (b, 0.5), (a, 0.5), arrowprops=dict(arrowstyle="->"))
        ax.text((a + b) / 2, 0.56, label, ha="center", fontsize=9)
    ax.set(xlim=(-0.3, 6.9), ylim=(-0.5, 1.05), title="one token through the FFN")
    ax.axis("off")
    fig.tight_layout()
    return fig


def plot_histograms(samples: dict, xlabel: str, bins: int = 60, title: str = "", figsize=(6, 3)):
    """Overlaid histograms (as densities) of several named 1-D samples, on shared bins."""
    import numpy as np

    if not samples:
        raise ValueError("samples must name at least one sample, got an empty dict")
    arrays = {k: np.asarray(v, dtype=float).ravel() for k, v in samples.items()}
    lo = min(a.min() for a in arrays.values())
    hi = max(a.max() for a in arrays.values())
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    fig, ax = plt.subplots(figsize=figsize)
    for name, a in arrays.items():
        ax.hist(a, bins=edges, density=True, alpha=0.5, label=name)
    ax.set(xlabel=xlabel, ylabel="density", title=title)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def embedding_labels(cfg, L: int = 8, B: int = 1) -> dict:
    """The text of every box of embedding_diagram, computed from a tfx BertConfig: three tables
    with their (rows × d_model) sizes, what indexes each, the shape each lookup gives, then the sum,
    LayerNorm (with its ε) and dropout (with its p), and the (B, L, d_model) that enters layer 1.
    """
    from tfx.model.bert import BertConfig

    if not isinstance(cfg, BertConfig):
        raise TypeError(f"cfg must be a tfx.model.bert.BertConfig, got {type(cfg).__name__}")
    for name, v in (("L", L), ("B", B)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if L > cfg.max_len:
        raise ValueError(
            f"L must be at most max_len = {cfg.max_len} (one position row each), got {L}"
        )
    d = cfg.d_model
    return {
        "token table": f"token embedding\n{cfg.vocab_size:,} × {d}",
        "segment table": f"segment embedding\n{cfg.type_vocab_size} × {d}",
        "position table": f"position embedding\n{cfg.max_len} × {d}",
        "token input": f"input_ids {(B, L)}",
        "segment input": f"token_type_ids {(B, L)}",
        "position input": f"positions 0 … {L - 1}",
        "token output": f"{(B, L, d)}",
        "segment output": f"{(B, L, d)}",
        "position output": f"{(L, d)}, broadcast",
        "sum": "+",
        "norm": f"LayerNorm({d}, ε = {cfg.eps:g})",
        "dropout": f"Dropout(p = {cfg.dropout:g})",
        "output": f"{(B, L, d)} → encoder layer 1",
    }


def _key_text(ax, x, y, labels: dict, key: str, ha="center", fontsize=9, **style):
    """labels[key] drawn at (x, y), the key kept as the text's label so drawn_labels reads it
    back."""
    ax.text(x, y, labels[key], ha=ha, va="center", fontsize=fontsize, label=key, **style)


def _key_box(ax, x, y, labels: dict, key: str, w=2.5, h=0.9, colour="#a8d5e2"):
    """A box centred at (x, y) with labels[key] in it."""
    _box(ax, (x - w / 2, y - h / 2), w, h, pad=0.05, facecolor=colour, edgecolor="black")
    _key_text(ax, x, y, labels, key)


def _lookup_column(ax, x: float, kind: str, labels: dict):
    """One lookup of embedding_diagram, top to bottom: what indexes the table, the table, the
    shape the lookup gives, and the arrow into the sum."""
    _key_text(ax, x, 9.5, labels, f"{kind} input", family="monospace")
    _arrow(ax, (x, 9.2), (x, 8.6))
    _key_box(ax, x, 8.0, labels, f"{kind} table")
    _arrow(ax, (x, 7.45), (x, 6.75))
    _key_text(ax, x + 0.1, 7.1, labels, f"{kind} output", "left", fontsize=9, family="monospace")
    _arrow(ax, (x, 6.45), (4.5 + (x - 4.5) * 0.08, 5.75))


def embedding_diagram(cfg, L: int = 8, B: int = 1, figsize=(7.5, 4.2)):
    """BERT's input embedding drawn from a tfx BertConfig: token, segment and position tables
    looked up, summed, then LayerNorm and dropout (so the sum alone is not what layer 1 sees).

    Every label comes from embedding_labels(cfg, L, B); each text carries its key as its matplotlib
    label, so a test can read the figure back.
    """
    labels = embedding_labels(cfg, L, B)
    fig, ax = plt.subplots(figsize=figsize)
    ax.set(xlim=(0, 9), ylim=(0, 10))
    ax.axis("off")
    for x, kind in ((1.5, "token"), (4.5, "segment"), (7.5, "position")):
        _lookup_column(ax, x, kind, labels)
    ax.add_patch(plt.Circle((4.5, 5.45), 0.3, facecolor="white", edgecolor="black"))
    _key_text(ax, 4.5, 5.45, labels, "sum", fontsize=11)
    _arrow(ax, (4.5, 5.1), (4.5, 4.45))
    _key_box(ax, 4.5, 3.95, labels, "norm", w=3.4, colour="#f6d55c")
    _arrow(ax, (4.5, 3.45), (4.5, 2.85))
    _key_box(ax, 4.5, 2.35, labels, "dropout", w=3.4, colour="#e0e0e0")
    _arrow(ax, (4.5, 1.85), (4.5, 1.25))
    _key_text(ax, 4.5, 0.9, labels, "output", family="monospace")
    ax.set_title(f"BERT's input embedding: d_model = {cfg.d_model}, L = {L}, B = {B}", fontsize=9)
    fig.tight_layout()
    return fig


def drawn_labels(fig) -> dict:
    """{key: text} of every labelled text of a figure drawn by embedding_diagram."""
    return {
        t.get_label(): t.get_text()
        for ax in fig.axes
        for t in ax.texts
        if t.get_label() and not t.get_label().startswith("_")
    }


CJK_FAMILY = use_cjk_fallback()
book_figures()  # retina PNGs, each checked for text too small on the page (tfx.book.figures)


# The parts of BERT a chapter can point at on its map (bert_map), bottom to top.
MAP_PARTS = ("tokens", "embeddings", "position", "attention", "ffn", "norm", "mlm", "classifier")


def _parts_named(here) -> set:
    """The parts of MAP_PARTS that `here` names: a part, a group ("encoder": every part of a
    layer; "all"), or a list of them."""
    if not isinstance(here, (str, list, tuple)):
        raise TypeError(f"here must be a part name or a list of them, got {type(here).__name__}")
    here = [here] if isinstance(here, str) else list(here)
    groups = {"encoder": ("attention", "ffn", "norm"), "all": MAP_PARTS}
    lit = set()
    for part in here:
        if part not in MAP_PARTS and part not in groups:
            raise ValueError(
                f"here: each part must be one of {MAP_PARTS + tuple(groups)}, got {part!r}"
            )
        lit |= set(groups.get(part, (part,)))
    return lit


def _map_boxes(cfg) -> list:
    """The boxes of bert_map, bottom to top, as (part, label, x centre, y centre, width), each
    label with cfg's sizes."""
    d, d_k = cfg.d_model, cfg.d_model // cfg.n_heads
    pos = "sinusoidal" if cfg.position == "sinusoidal" else f"{cfg.max_len} × {d}"
    return [
        ("tokens", f"token ids (B, L), L ≤ {cfg.max_len}", 0, 0.0, 3.6),
        ("embeddings", f"token\n{cfg.vocab_size:,} × {d}", -1.25, 1.0, 1.1),
        ("position", f"position\n{pos}", 0, 1.0, 1.1),
        ("embeddings", f"segment\n{cfg.type_vocab_size} × {d}", 1.25, 1.0, 1.1),
        ("norm", "sum, LayerNorm → (B, L, d)", 0, 2.0, 3.6),
        ("attention", f"attention: {cfg.n_heads} heads × d_k {d_k}", 0, 3.2, 3.2),
        ("norm", "add, LayerNorm", 0, 4.0, 3.2),
        ("ffn", f"feed-forward {d} → {cfg.d_ff} → {d}, {cfg.activation}", 0, 4.8, 3.2),
        ("norm", "add, LayerNorm", 0, 5.6, 3.2),
        ("mlm", f"masked-LM head\n{d} → {cfg.vocab_size:,} (tied)", -0.95, 6.8, 1.7),
        ("classifier", "pooler [CLS]\n→ classifier", 0.95, 6.8, 1.7),
    ]


def _map_flow(ax, n_layers: int):
    """What bert_map draws between its boxes: the encoder layer's dashed frame, repeated
    n_layers times, and the arrows from the token ids up to the two heads."""
    _box(ax, (-1.8, 2.75), 3.6, 3.3, pad=0.05, facecolor="none", edgecolor="#555", linestyle="--")
    ax.text(1.85, 2.8, f"× {n_layers}", ha="left", va="bottom", fontsize=10)
    for y0, y1 in (
        (0.25, 0.7),
        (1.3, 1.75),
        (2.25, 2.95),
        (3.45, 3.75),
        (4.25, 4.55),
        (5.05, 5.35),
    ):
        _arrow(ax, (0, y0), (0, y1))
    for x in (-0.95, 0.95):
        _arrow(ax, (0, 5.85), (x, 6.45))


def bert_map(cfg, here, figsize=(4.4, 5.2)):
    """BERT from token ids to its two heads, one box per part, each labelled with `cfg`'s sizes
    (a tfx BertConfig, so the map cannot drift from the model), the parts named in `here` (a
    part of MAP_PARTS, "encoder" for every part of a layer, or "all") filled in colour and the
    rest grey. The site puts one at the top of every chapter: where in the model the chapter
    works. Built for the site (tools/prepare_book.py)."""
    from tfx.model.bert import BertConfig

    if not isinstance(cfg, BertConfig):
        raise TypeError(f"cfg must be a tfx.model.bert.BertConfig, got {type(cfg).__name__}")
    lit = _parts_named(here)
    fig, ax = plt.subplots(figsize=figsize, dpi=100)
    ax.set_xlim(-2.1, 2.1)
    ax.set_ylim(-0.5, 7.4)
    ax.axis("off")
    _map_flow(ax, cfg.n_layers)
    for part, label, x, y, w in _map_boxes(cfg):
        on, two_lines = part in lit, "\n" in label
        fill, edge, ink = ("#f6b26b", "black", "black") if on else ("#eeeeee", "#999", "#777")
        h, y_text = (0.6, y + 0.05) if two_lines else (0.5, y)
        _box(ax, (x - w / 2, y - 0.25), w, h, pad=0.03, facecolor=fill, edgecolor=edge)
        ax.text(x, y_text, label, ha="center", va="center", fontsize=9, label=part, color=ink)
    fig.tight_layout()
    return fig


def lit_parts(fig) -> set:
    """The parts drawn in colour on a bert_map figure (for tests)."""
    return {t.get_label() for t in fig.axes[0].texts if t.get_color() == "black" and t.get_label()}


def save_bert_map(here, path, cfg=None) -> str:
    """Draw `bert_map(cfg, here)` (BERT-base's configuration unless `cfg` is given) to an SVG file
    at `path`, the same bytes on every run (no date, a fixed hash salt, text kept as text), and
    return what it shows in words, for the figure's alt text. The site's chapter maps are drawn
    with it (tools/prepare_book.py), so the build tools never build a model configuration."""
    from tfx.model.bert import BertConfig

    cfg = BertConfig.base() if cfg is None else cfg
    fig = bert_map(cfg, here)
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tfx"}):
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return (
        f"token ids, the token, position and segment embeddings, {cfg.n_layers} encoder layers of "
        "attention, feed-forward and LayerNorm, then the masked-LM and classifier heads"
    )
