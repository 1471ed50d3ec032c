"""ipywidgets for the chapters. Each widget is a thin shell over a pure function that computes what
it shows, so the logic is tested without a browser and the widget cannot crash at its extremes.

Every widget follows one pattern:

    controls = {"depth": int_slider("depth", 12, 1, 48), "residual": checkbox("residual", True)}

    def frame(depth, residual):  # pure: the kernel and the static site both call it
        return report(depth, residual)  # its text, or a (text, figure) pair

    return _shell(controls, frame, rows=[("depth", "residual")])

one line per control (the constructors below), one pure frame function whose keywords are the
keys of `controls`, and `_shell`, which wires them to an Output once for every widget.
"""

import ipywidgets as widgets

REVIEW_PRESETS = {
    "praise": "房间很干净，服务也很周到，下次还会再来。",
    "complaint": "等了一个星期才到货，客服也不理人，太失望了。",
    "but…": "价格不贵，可是质量太差了。",
    "not bad": "这本书还不错，值得一看。",
    "long": "酒店位置很好，离地铁站很近，周围吃饭也方便。可是房间隔音太差，晚上走廊里一直有人说话，"
    "空调也很吵，几乎一夜没睡好。早餐种类很少，服务员态度一般。",
}
OWN_TEXT = "your text"


def _style(wide: bool) -> dict:
    """The label's width. wide: as long as its text, so "forget-gate bias" is not cut off; else
    ipywidgets' fixed label column, which lines short labels (L, d_model) up in a grid."""
    return {"description_width": "initial" if wide else ""}


def _on_release(label: str, wide: bool = True) -> dict:
    """The keywords of a slider or a text box: its label, and continuous_update=False, so the frame
    runs when the reader lets go (or presses Enter): a frame can take a second, and a drag would
    queue one per pixel."""
    return {"description": label, "style": _style(wide), "continuous_update": False}


# One line per control: the constructors the widgets below are declared with.


def int_slider(label: str, value: int, lo: int, hi: int, step: int = 1, wide: bool = True):
    """An integer slider from lo to hi."""
    return widgets.IntSlider(value, min=lo, max=hi, step=step, **_on_release(label, wide))


def float_slider(label: str, value: float, lo: float, hi: float, step: float = 0.1):
    """A float slider from lo to hi."""
    return widgets.FloatSlider(value, min=lo, max=hi, step=step, **_on_release(label))


def log_slider(label: str, value, lo, hi, step, base=10, wide: bool = True):
    """A slider on a log scale: its value is base ** exponent, the exponent from lo to hi by step,
    so a range of several decades gets as many stops in each."""
    return widgets.FloatLogSlider(
        value, base=base, min=lo, max=hi, step=step, **_on_release(label, wide)
    )


def checkbox(label: str, value: bool = False, indent: bool = True, wide: bool = True):
    """A checkbox; indent=False puts the box at the left edge, to sit beside another control."""
    return widgets.Checkbox(value=value, description=label, indent=indent, style=_style(wide))


def dropdown(label: str, options, value):
    """A drop-down list; options are labels, or (label, value) pairs."""
    return widgets.Dropdown(options=options, value=value, description=label, style=_style(True))


def toggle(label: str, options, value):
    """A row of buttons, one per option (labels, or (label, value) pairs): every choice in sight."""
    return widgets.ToggleButtons(
        options=options, value=value, description=label, style=_style(True)
    )


def text_box(label: str, placeholder: str):
    """An empty text box for the reader's own sentence."""
    return widgets.Text(value="", placeholder=placeholder, **_on_release(label))


def frame_parts(result) -> tuple:
    """A widget frame as (text, figure or None): a frame function returns its text, or a pair."""
    return (result, None) if isinstance(result, str) else tuple(result)


def _row(row, controls: dict):
    """One row of the layout: a key of `controls` (or a widget) alone, or a tuple or list of
    them side by side in an HBox."""
    if isinstance(row, (list, tuple)):
        return widgets.HBox([_row(item, controls) for item in row])
    if isinstance(row, str):
        if row not in controls:
            raise ValueError(f"rows: {row!r} is not a key of controls {list(controls)}")
        return controls[row]
    return row


def _shell(controls: dict, frame, rows: list = None, on_change=None) -> widgets.VBox:
    """The live widget: `controls` (keyword -> control) wired to an Output that shows
    `frame(**values)`, the text it returns or a (text, matplotlib figure) pair. `rows` lays the
    controls out, one row each (a key of `controls` or a widget, or a tuple of them side by side;
    default: one control per row); the Output goes below. `on_change` only adjusts the controls
    themselves.

    The box keeps the function and the controls (`tfx_frame`, `tfx_controls`): the static site
    (tools/static_widgets.py) precomputes its settings by calling the very same pure function, so
    the page and the kernel cannot disagree."""
    out = widgets.Output()
    box = widgets.VBox([_row(row, controls) for row in rows or list(controls)] + [out])

    def update(_=None):
        if on_change is not None:
            on_change()
        text, fig = frame_parts(frame(**{k: c.value for k, c in controls.items()}))
        out.clear_output(wait=True)
        with out:
            print(text)
            if fig is not None:
                import matplotlib.pyplot as plt
                from IPython.display import display

                display(fig)
                plt.close(fig)

    for control in controls.values():
        control.observe(update, names="value")
    update()
    box.tfx_frame, box.tfx_controls = frame, controls
    return box


def forget_bias_widget():
    """Chapter 00: move the LSTM's forget-gate bias and watch its gradient against distance (vs
    attention)."""
    from tfx.learn.rnn import forget_bias_report

    return _shell({"forget_bias": int_slider("forget-gate bias", 0, 0, 10)}, forget_bias_report)


def shapes_widget():
    """Chapter 01: sliders for L, d_model, heads and d_ff; the kernel prints
    tfx.inspect.flops.shapes_report."""
    from tfx.inspect.flops import shapes_report

    controls = {
        "L": int_slider("L", 8, 1, 4096, wide=False),
        "d_model": int_slider("d_model", 768, 64, 1024, step=64, wide=False),
        "n_heads": int_slider("heads", 12, 1, 16, wide=False),
        "d_ff": int_slider("d_ff", 3072, 256, 8192, step=256, wide=False),
    }
    return _shell(controls, shapes_report, [("L", "d_model"), ("n_heads", "d_ff")])


def pe_widget(max_len: int = 64, d_model: int = 128):
    """Chapter 02: pick a position and a dimension, move the base; the kernel prints
    tfx.model.position.pe_report and redraws the table with the chosen entry marked."""
    from tfx.book.viz import plot_pe
    from tfx.model.position import pe_report, sinusoidal_encoding

    controls = {
        "position": int_slider("position", 0, 0, max_len - 1, wide=False),
        "dim": int_slider("dim", 0, 0, d_model - 1, wide=False),
        "base": log_slider("base", 10000.0, 1, 6, 0.25, wide=False),
    }

    def frame(position, dim, base):
        table = sinusoidal_encoding(max_len, d_model, base)  # (max_len, d_model)
        return pe_report(position, dim, base, d_model), plot_pe(table, position, dim)

    return _shell(controls, frame, [("position", "dim", "base")])


def attention_perturbation_widget(mha, x, tokens, head_names=None):
    """Chapter 03: zero W_O, scale one head, change the softmax temperature, add noise to W_Q;
    the kernel recomputes the output norm, the cosine to the unperturbed output and the heatmaps
    of every head.
    """
    from tfx.book.viz import attention_grid
    from tfx.inspect.probes import Perturbation, perturbation_effect

    names = head_names or [f"head {h}" for h in range(mha.n_heads)]
    # "none" is -1, not None: a Dropdown whose value is None shows a blank box
    heads = [("none", -1)] + [(n, h) for h, n in enumerate(names)]
    controls = {
        "zero_wo": checkbox("zero W_O"),
        "head": dropdown("scaled head", heads, -1),
        "head_scale": float_slider("head scale", 1.0, 0.0, 2.0),
        "temperature": log_slider("temperature", 1.0, -1.3, 1.3, 0.1),
        "wq_noise": float_slider("W_Q noise", 0.0, 0.0, 2.0),
    }

    def frame(zero_wo, head, head_scale, temperature, wq_noise):
        p = Perturbation(
            zero_wo=zero_wo,
            head=None if head < 0 else head,
            head_scale=head_scale,
            temperature=temperature,
            wq_noise=wq_noise,
        )
        r = perturbation_effect(mha, x, p)
        return r.report(), attention_grid(r.weights[0], tokens, col_names=names)

    rows = [("zero_wo", "head", "head_scale"), ("temperature", "wq_noise")]
    return _shell(controls, frame, rows)


def gradient_check_widget():
    """Chapter 09: inject a bug into the backward pass, move the finite-difference step h and the
    precision; the kernel prints which gradients the check flags (tfx.numpy.numpy_ref)."""
    from tfx.numpy.numpy_ref import BACKWARD_BUGS, gradient_check_report

    controls = {
        "bug": toggle("backward bug", ["none", *BACKWARD_BUGS], "none"),
        "log10_h": int_slider("-log10 h", 6, 1, 16),
        "float32": checkbox("float32", indent=False, wide=False),
    }
    return _shell(controls, gradient_check_report, ["bug", ("log10_h", "float32")])


def position_widget(model, ids, tokens):
    """Chapter 02: keep, drop, shuffle or reverse the position vectors of a tfx BertModel, and scale
    them; the kernel prints tfx.inspect.probes.position_effect (how every token's output vector
    moves, and whether the sentence read backwards gives the same vectors backwards)."""
    from tfx.inspect.probes import POSITION_MODES, position_effect

    controls = {
        "mode": toggle("positions", list(POSITION_MODES), "kept"),
        "scale": float_slider("position scale", 1.0, 0.0, 4.0, step=0.5),
    }

    def frame(mode, scale):
        return position_effect(model, ids, mode, scale, tokens).report()

    return _shell(controls, frame)


def ffn_widget(x, ff=None, max_mult: int = 8):
    """Chapter 04: which FFN (the trained one passed as `ff`, or a fresh one of any width), its
    activation, and which hidden units are zeroed (in a random order or the largest contributions
    first); the kernel prints tfx.model.ffn.width_probe: output change, cosine to the unperturbed
    output, parameter count. With `ff` given the width is the trained FFN's, and the width slider
    only acts on the fresh one."""
    from tfx.model.ffn import ZERO_ORDERS, width_probe

    d_model = x.size(-1)
    trained_mult = None if ff is None else ff.fc1.out_features // d_model
    which = ["fresh"] if ff is None else ["trained", "fresh"]  # the first is the default
    activations = ["gelu", "gelu_tanh", "gelu_sigmoid", "article", "relu"]
    controls = {
        "which": dropdown("FFN", which, which[0]),
        "mult": int_slider("width ×", 4, 1, max_mult),
        "act": dropdown("activation", activations, "gelu"),
        "frac": float_slider("zeroed fraction", 0.0, 0.0, 1.0),
        "order": dropdown("zero order", list(ZERO_ORDERS), "random"),
        # -1: none; every width has at least d_model hidden units, so every stop exists
        "unit": int_slider("zero unit", -1, -1, d_model - 1),
    }

    def frame(which, mult, act, frac, order, unit):
        if which == "trained":
            return width_probe(x, trained_mult, act, frac, unit, ff=ff, order=order).report()
        return width_probe(x, mult, act, frac, unit, order=order).report()

    def on_change():
        controls["mult"].disabled = controls["which"].value == "trained"

    rows = [("which", "mult", "act"), ("frac", "order", "unit")]
    return _shell(controls, frame, rows, on_change)


def layernorm_residual_widget(depth: int = 12):
    """Chapter 05: residual on/off, LayerNorm on/off, post-LN or pre-LN, depth, and the scale s of
    the initial weights (std s/sqrt(fan_in), 1/4 to 4); the kernel prints
    tfx.inspect.stack.activation_report for a fresh stack on the running example and redraws the
    per-layer mean and std of the residual stream. The init scale is the weight perturbation: it
    shows that what LayerNorm and the residual do depends on how large the weights are. Chapter 06's
    widget reads the same probe's gradients."""
    from tfx.book.viz import plot_stack_activations
    from tfx.inspect.stack import MAX_DEPTH, StackConfig, activation_report, probe_stack

    controls = {
        "residual": checkbox("residual", True),
        "norm_on": checkbox("LayerNorm", True),
        "placement": toggle("", [("post-LN", "post"), ("pre-LN", "pre")], "post"),
        "depth": int_slider("depth", depth, 1, MAX_DEPTH),
        # s = 1/4, 1/2, 1, 2, 4: every weight drawn from N(0, s²/fan_in)
        "init_scale": log_slider("init scale", 1.0, -2, 2, 1, base=2),
    }

    def frame(residual, norm_on, placement, depth, init_scale):
        norm = placement if norm_on else "none"
        cfg = StackConfig(depth=depth, norm=norm, residual=residual, init_scale=init_scale)
        p = probe_stack(cfg)
        return activation_report(p), plot_stack_activations(p)

    def on_change():
        controls["placement"].disabled = not controls["norm_on"].value

    rows = [("residual", "norm_on", "placement"), ("depth", "init_scale")]
    return _shell(controls, frame, rows, on_change)


def gradient_flow_widget():
    """Chapter 06: depth, init scale, norm placement and residual; the kernel reruns
    tfx.inspect.stack.probe_stack, prints tfx.inspect.stack.gradient_report and redraws the
    per-layer gradient norms."""
    import math

    from tfx.book.viz import plot_curves
    from tfx.inspect.stack import (
        INIT_SCALE_RANGE,
        MAX_DEPTH,
        StackConfig,
        gradient_report,
        probe_stack,
    )

    lo, hi = (math.log10(v) for v in INIT_SCALE_RANGE)
    norms = [("post-LN", "post"), ("pre-LN", "pre"), ("no LN", "none")]
    controls = {
        "depth": int_slider("depth", 12, 1, MAX_DEPTH),
        "init_scale": log_slider("init scale", 1.0, lo, hi, 0.25),
        "norm": dropdown("norm placement", norms, "post"),
        "residual": checkbox("residual", True, indent=False, wide=False),
    }

    def frame(depth, init_scale, norm, residual):
        cfg = StackConfig(depth=depth, norm=norm, residual=residual, init_scale=init_scale)
        p = probe_stack(cfg)
        fig = plot_curves(
            range(1, depth + 1),
            {"‖∂loss/∂θ‖ (parameters)": p.grad_norm, "‖∂loss/∂x_in‖": p.input_grad_norm},
            "layer",
            "gradient norm",
            logy=True,
            marker="o" if depth <= 24 else None,
            title="gradient reaching each layer",
        )
        return gradient_report(p), fig

    return _shell(controls, frame, [("depth", "init_scale"), ("norm", "residual")])


def masked_lm_widget(model, vocab, presets=None):
    """Chapter 07: pick a preset sentence with one [MASK], or type one (and mask a position or
    write [MASK]); the kernel prints the top-5 predictions of the model (tfx.learn.mlm.mlm_report).
    Checkboxes zero W_Q, W_K, W_V or W_O of any layer for the prediction.
    """
    from tfx.learn.mlm import PROJECTIONS, mlm_report

    presets = list(
        presets
        or ("我喜欢吃[MASK]果。", "你叫什么名[MASK]？", "他是我的朋[MASK]。", "今天天[MASK]很好。")
    )
    layers = range(len(model.bert.layers))
    names = {(i, p): f"layer{i}_{p}" for i in layers for p in PROJECTIONS}  # keyword of each box
    controls = {
        "example": toggle("sentence", [*presets, OWN_TEXT], presets[0]),
        "sentence": text_box(OWN_TEXT, "我喜欢吃[MASK]果。"),
        "position": widgets.BoundedIntText(
            value=0, min=0, max=99, description="mask position (0: use [MASK])", style=_style(True)
        ),
    }
    controls |= {
        name: checkbox(f"layer {i + 1} {p}", indent=False) for (i, p), name in names.items()
    }

    def frame(example, sentence, position, **zero):
        zeroed = [key for key, name in names.items() if zero[name]]
        text = sentence if example == OWN_TEXT else example
        return mlm_report(model, vocab, text, position, zeroed)

    rows = ["example", ("sentence", "position")]
    rows += [tuple(names[(i, p)] for p in PROJECTIONS) for i in layers]
    return _shell(controls, frame, rows)


def precision_widget(results):
    """Chapter 08: pick a precision and a sequence length; the kernel prints what bench/int8.py
    recorded (tfx.learn.compress.precision_report): the BERT-base-sized encoder's time against fp32
    and the book model's held-out accuracy. Recorded numbers, not live timings: a live timing
    on a shared machine would change at every click, and the static site has no kernel."""
    from tfx.learn.compress import PRECISIONS, precision_report

    lengths = [int(L) for L in results["base"]["rows"]]
    controls = {
        "precision": toggle("precision", list(PRECISIONS), "fp32"),
        "length": toggle("length", [(str(L), L) for L in lengths], lengths[len(lengths) // 2]),
    }

    def frame(precision, length):
        return precision_report(results, precision, length)

    return _shell(controls, frame)


def sentiment_widget(model, vocab, presets: dict = None, body=None, check=None):
    """Chapter 10: pick a review (or type one); the kernel prints the fine-tuned model's class
    probabilities and the characters that move them most (tfx.learn.finetuning.sentiment_report).
    Given the pre-trained `body` it was fine-tuned from and `check` ((text, label) pairs), one
    checkbox per body part puts that part's pre-trained weights back, and the frame shows what it
    does to the review and to the accuracy on `check` (tfx.learn.finetuning.restored_report)."""
    from tfx.learn.finetuning import body_parts, restore_parts, restored_report, sentiment_report

    presets = dict(REVIEW_PRESETS if presets is None else presets)
    controls = {
        "example": toggle("review", [*presets, OWN_TEXT], next(iter(presets))),
        "text": text_box(OWN_TEXT, "输入一条评论"),
    }
    parts = body_parts(model) if body is not None else []
    names = {part: part.replace(" ", "") + "_restored" for part in parts}  # keyword of each box
    controls |= {
        name: checkbox(f"{part}: pre-trained", indent=False) for part, name in names.items()
    }

    def frame(example, text, **restored):
        text = text if example == OWN_TEXT else presets[example]
        if body is None:
            return sentiment_report(model, vocab, text)
        back = [part for part, name in names.items() if restored[name]]
        head = restored_report(model, body, vocab, back, check)
        return head + "\n\n" + sentiment_report(restore_parts(model, body, back), vocab, text)

    rows = ["example", "text"] + ([tuple(names.values())] if parts else [])
    return _shell(controls, frame, rows)


def bug_zoo_widget():
    """Chapter 11: pick a bug from the zoo and inject it or not; the kernel prints the symptom and
    the diagnostic's verdict (tfx.zoo.bugzoo.frame), with a figure for some bugs."""
    from tfx.zoo.bugzoo import BUGS, frame

    controls = {
        "bug": toggle("bug", list(BUGS), next(iter(BUGS))),
        "injected": checkbox("injected", True),
    }
    return _shell(controls, frame)
