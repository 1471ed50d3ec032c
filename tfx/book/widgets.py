"""ipywidgets for the chapters. Each widget is a thin shell over a pure function that computes what
it shows, so the logic is tested without a browser and the widget cannot crash at its extremes.
"""

import ipywidgets as widgets


def frame_parts(result) -> tuple:
    """A widget frame as (text, figure or None): a frame function returns its text, or a pair."""
    return (result, None) if isinstance(result, str) else tuple(result)


def _shell(controls: dict, frame, rows: list, on_change=None) -> widgets.VBox:
    """The live widget: `controls` (keyword -> control) wired to an Output that shows
    `frame(**values)`, the text it returns or a (text, matplotlib figure) pair. `rows` lays the
    controls out; the Output goes below. `on_change` only adjusts the controls themselves.

    The box keeps the function and the controls (`tfx_frame`, `tfx_controls`): the static site
    (tools/static_widgets.py) precomputes its settings by calling the very same pure function, so
    the page and the kernel cannot disagree."""
    out = widgets.Output()

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
    box = widgets.VBox([*rows, out])
    box.tfx_frame, box.tfx_controls = frame, controls
    return box


def forget_bias_widget():
    """Chapter 00: move the LSTM's forget-gate bias and watch its gradient against distance (vs
    attention)."""
    from tfx.learn.rnn import forget_bias_report

    slider = widgets.IntSlider(
        value=0,
        min=0,
        max=10,
        step=1,
        description="forget-gate bias",
        style={"description_width": "initial"},
        continuous_update=False,
    )
    return _shell({"forget_bias": slider}, forget_bias_report, [slider])


def shapes_widget():
    """Chapter 01: sliders for L, d_model, heads and d_ff; the kernel prints
    tfx.inspect.flops.shapes_report."""
    from tfx.inspect.flops import shapes_report

    sliders = {
        "L": widgets.IntSlider(8, min=1, max=4096, description="L", continuous_update=False),
        "d_model": widgets.IntSlider(
            768, min=64, max=1024, step=64, description="d_model", continuous_update=False
        ),
        "n_heads": widgets.IntSlider(
            12, min=1, max=16, description="heads", continuous_update=False
        ),
        "d_ff": widgets.IntSlider(
            3072, min=256, max=8192, step=256, description="d_ff", continuous_update=False
        ),
    }
    rows = [widgets.HBox(list(sliders.values())[:2]), widgets.HBox(list(sliders.values())[2:])]
    return _shell(sliders, shapes_report, rows)


def pe_widget(max_len: int = 64, d_model: int = 128):
    """Chapter 02: pick a position and a dimension, move the base; the kernel prints
    tfx.model.position.pe_report and redraws the table with the chosen entry marked."""
    from tfx.book.viz import plot_pe
    from tfx.model.position import pe_report, sinusoidal_encoding

    position = widgets.IntSlider(
        0, min=0, max=max_len - 1, description="position", continuous_update=False
    )
    dim = widgets.IntSlider(0, min=0, max=d_model - 1, description="dim", continuous_update=False)
    base = widgets.FloatLogSlider(
        10000.0, base=10, min=1, max=6, step=0.25, description="base", continuous_update=False
    )

    def frame(position, dim, base):
        table = sinusoidal_encoding(max_len, d_model, base)  # (max_len, d_model)
        return pe_report(position, dim, base, d_model), plot_pe(table, position, dim)

    controls = {"position": position, "dim": dim, "base": base}
    return _shell(controls, frame, [widgets.HBox([position, dim, base])])


def attention_perturbation_widget(mha, x, tokens, head_names=None):
    """Chapter 03: zero W_O, scale one head, change the softmax temperature, add noise to W_Q;
    the kernel recomputes the output norm, the cosine to the unperturbed output and the heatmaps
    of every head.
    """
    from tfx.book.viz import attention_grid
    from tfx.inspect.probes import Perturbation, perturbation_effect

    style = {"description_width": "initial"}
    zero_wo = widgets.Checkbox(value=False, description="zero W_O", style=style)
    names = head_names or [f"head {h}" for h in range(mha.n_heads)]
    head = widgets.Dropdown(
        options=[("none", -1)] + [(n, h) for h, n in enumerate(names)],
        value=-1,
        description="scaled head",
        style=style,
    )  # -1, not None: None shows a blank box
    scale = widgets.FloatSlider(
        value=1.0,
        min=0.0,
        max=2.0,
        step=0.1,
        description="head scale",
        style=style,
        continuous_update=False,
    )
    temp = widgets.FloatLogSlider(
        value=1.0,
        base=10,
        min=-1.3,
        max=1.3,
        step=0.1,
        description="temperature",
        style=style,
        continuous_update=False,
    )
    noise = widgets.FloatSlider(
        value=0.0,
        min=0.0,
        max=2.0,
        step=0.1,
        description="W_Q noise",
        style=style,
        continuous_update=False,
    )

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

    controls = {
        "zero_wo": zero_wo,
        "head": head,
        "head_scale": scale,
        "temperature": temp,
        "wq_noise": noise,
    }
    rows = [widgets.HBox([zero_wo, head, scale]), widgets.HBox([temp, noise])]
    return _shell(controls, frame, rows)


def gradient_check_widget():
    """Chapter 09: move the finite-difference step h and the precision; the kernel prints the
    gradient check."""
    from tfx.numpy.numpy_ref import gradient_check_report

    slider = widgets.IntSlider(
        value=6,
        min=1,
        max=16,
        step=1,
        description="-log10 h",
        style={"description_width": "initial"},
        continuous_update=False,
    )
    box = widgets.Checkbox(value=False, description="float32", indent=False)
    controls = {"log10_h": slider, "float32": box}
    return _shell(controls, gradient_check_report, [widgets.HBox([slider, box])])


def position_widget(model, ids, tokens):
    """Chapter 02: keep, drop, shuffle or reverse the position vectors of a tfx BertModel, and scale
    them; the kernel prints tfx.inspect.probes.position_effect (how every token's output vector
    moves, and whether the sentence read backwards gives the same vectors backwards)."""
    from tfx.inspect.probes import POSITION_MODES, position_effect

    style = {"description_width": "initial"}
    mode = widgets.ToggleButtons(
        options=list(POSITION_MODES), value="kept", description="positions", style=style
    )
    scale = widgets.FloatSlider(
        value=1.0,
        min=0.0,
        max=4.0,
        step=0.5,
        description="position scale",
        style=style,
        continuous_update=False,
    )

    def frame(mode, scale):
        return position_effect(model, ids, mode, scale, tokens).report()

    return _shell({"mode": mode, "scale": scale}, frame, [mode, scale])


def ffn_widget(x, ff=None, max_mult: int = 8):
    """Chapter 04: which FFN (the trained one passed as `ff`, or a fresh one of any width), its
    activation, and which hidden units are zeroed (in a random order or the largest contributions
    first); the kernel prints tfx.model.ffn.width_probe: output change, cosine to the unperturbed
    output, parameter count. With `ff` given the width is the trained FFN's, and the width slider
    only acts on the fresh one."""
    from tfx.model.ffn import ZERO_ORDERS, width_probe

    style = {"description_width": "initial"}
    d_model = x.size(-1)
    trained_mult = None if ff is None else ff.fc1.out_features // d_model
    which = widgets.Dropdown(
        options=["fresh"] if ff is None else ["trained", "fresh"],
        value="fresh" if ff is None else "trained",
        description="FFN",
        style=style,
    )
    mult = widgets.IntSlider(
        4, min=1, max=max_mult, description="width ×", style=style, continuous_update=False
    )
    act = widgets.Dropdown(
        options=["gelu", "gelu_tanh", "gelu_sigmoid", "article", "relu"],
        value="gelu",
        description="activation",
        style=style,
    )
    frac = widgets.FloatSlider(
        0.0,
        min=0.0,
        max=1.0,
        step=0.1,
        description="zeroed fraction",
        style=style,
        continuous_update=False,
    )
    order = widgets.Dropdown(
        options=list(ZERO_ORDERS), value="random", description="zero order", style=style
    )
    unit = widgets.IntSlider(
        -1,
        min=-1,
        max=d_model - 1,
        description="zero unit",
        style=style,
        continuous_update=False,
    )  # -1 = none; every width has at least d_model units

    def frame(which, mult, act, frac, order, unit):
        if which == "trained":
            return width_probe(x, trained_mult, act, frac, unit, ff=ff, order=order).report()
        return width_probe(x, mult, act, frac, unit, order=order).report()

    def on_change():
        mult.disabled = which.value == "trained"

    controls = {
        "which": which,
        "mult": mult,
        "act": act,
        "frac": frac,
        "order": order,
        "unit": unit,
    }
    rows = [widgets.HBox([which, mult, act]), widgets.HBox([frac, order, unit])]
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

    style = {"description_width": "initial"}
    residual = widgets.Checkbox(value=True, description="residual", style=style)
    norm_on = widgets.Checkbox(value=True, description="LayerNorm", style=style)
    placement = widgets.ToggleButtons(
        options=[("post-LN", "post"), ("pre-LN", "pre")], value="post", style=style
    )
    depth_slider = widgets.IntSlider(
        value=depth,
        min=1,
        max=MAX_DEPTH,
        description="depth",
        style=style,
        continuous_update=False,
    )
    scale = widgets.FloatLogSlider(
        1.0,
        base=2,
        min=-2,
        max=2,
        step=1,
        description="init scale",
        style=style,
        continuous_update=False,
    )  # s = 1/4, 1/2, 1, 2, 4: every weight drawn from N(0, s²/fan_in)

    def frame(residual, norm_on, placement, depth, init_scale):
        norm = placement if norm_on else "none"
        cfg = StackConfig(depth=depth, norm=norm, residual=residual, init_scale=init_scale)
        p = probe_stack(cfg)
        return activation_report(p), plot_stack_activations(p)

    def on_change():
        placement.disabled = not norm_on.value

    controls = {
        "residual": residual,
        "norm_on": norm_on,
        "placement": placement,
        "depth": depth_slider,
        "init_scale": scale,
    }
    rows = [widgets.HBox([residual, norm_on, placement]), widgets.HBox([depth_slider, scale])]
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

    style = {"description_width": "initial"}
    depth = widgets.IntSlider(
        12, min=1, max=MAX_DEPTH, description="depth", style=style, continuous_update=False
    )
    lo, hi = (math.log10(v) for v in INIT_SCALE_RANGE)
    scale = widgets.FloatLogSlider(
        1.0,
        base=10,
        min=lo,
        max=hi,
        step=0.25,
        description="init scale",
        style=style,
        continuous_update=False,
    )
    norm = widgets.Dropdown(
        options=[("post-LN", "post"), ("pre-LN", "pre"), ("no LN", "none")],
        value="post",
        description="norm placement",
        style=style,
    )
    residual = widgets.Checkbox(value=True, description="residual", indent=False)

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

    controls = {"depth": depth, "init_scale": scale, "norm": norm, "residual": residual}
    rows = [widgets.HBox([depth, scale]), widgets.HBox([norm, residual])]
    return _shell(controls, frame, rows)


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
    style = {"description_width": "initial"}
    example = widgets.ToggleButtons(
        options=[*presets, OWN_TEXT], value=presets[0], description="sentence", style=style
    )
    sentence = widgets.Text(
        value="",
        description=OWN_TEXT,
        placeholder="我喜欢吃[MASK]果。",
        style=style,
        continuous_update=False,
    )
    position = widgets.BoundedIntText(
        value=0, min=0, max=99, description="mask position (0: use [MASK])", style=style
    )
    boxes = {
        (i, name): widgets.Checkbox(
            value=False, description=f"layer {i + 1} {name}", indent=False, style=style
        )
        for i in range(len(model.bert.layers))
        for name in PROJECTIONS
    }
    names = {key: f"layer{key[0]}_{key[1]}" for key in boxes}  # keyword of each checkbox

    def frame(example, sentence, position, **zero):
        zeroed = [key for key, name in names.items() if zero[name]]
        text = sentence if example == OWN_TEXT else example
        return mlm_report(model, vocab, text, position, zeroed)

    controls = {"example": example, "sentence": sentence, "position": position}
    controls |= {names[key]: box for key, box in boxes.items()}
    rows = [
        widgets.HBox([boxes[(i, n)] for n in PROJECTIONS]) for i in range(len(model.bert.layers))
    ]
    return _shell(controls, frame, [example, widgets.HBox([sentence, position]), *rows])


def precision_widget(results):
    """Chapter 08: pick a precision and a sequence length; the kernel prints what bench/int8.py
    recorded (tfx.learn.compress.precision_report): the BERT-base-sized encoder's time against fp32
    and the book model's held-out accuracy. Recorded numbers, not live timings: a live timing
    on a shared machine would change at every click, and the static site has no kernel."""
    from tfx.learn.compress import PRECISIONS, precision_report

    style = {"description_width": "initial"}
    precision = widgets.ToggleButtons(
        options=list(PRECISIONS), value="fp32", description="precision", style=style
    )
    lengths = [int(L) for L in results["base"]["rows"]]
    length = widgets.ToggleButtons(
        options=[(str(L), L) for L in lengths],
        value=lengths[len(lengths) // 2],
        description="length",
        style=style,
    )

    def frame(precision, length):
        return precision_report(results, precision, length)

    controls = {"precision": precision, "length": length}
    return _shell(controls, frame, [precision, length])


REVIEW_PRESETS = {
    "praise": "房间很干净，服务也很周到，下次还会再来。",
    "complaint": "等了一个星期才到货，客服也不理人，太失望了。",
    "but…": "价格不贵，可是质量太差了。",
    "not bad": "这本书还不错，值得一看。",
    "long": "酒店位置很好，离地铁站很近，周围吃饭也方便。可是房间隔音太差，晚上走廊里一直有人说话，"
    "空调也很吵，几乎一夜没睡好。早餐种类很少，服务员态度一般。",
}
OWN_TEXT = "your text"


def sentiment_widget(model, vocab, presets: dict = None):
    """Chapter 10: pick a review (or type one); the kernel prints the fine-tuned model's class
    probabilities and the characters that move them most (tfx.learn.finetuning.sentiment_report)."""
    from tfx.learn.finetuning import sentiment_report

    presets = dict(REVIEW_PRESETS if presets is None else presets)
    style = {"description_width": "initial"}
    example = widgets.ToggleButtons(
        options=[*presets, OWN_TEXT], value=next(iter(presets)), description="review", style=style
    )
    text = widgets.Text(
        value="",
        description=OWN_TEXT,
        placeholder="输入一条评论",
        style=style,
        continuous_update=False,
    )

    def frame(example, text):
        return sentiment_report(model, vocab, text if example == OWN_TEXT else presets[example])

    return _shell({"example": example, "text": text}, frame, [example, text])


def bug_zoo_widget():
    """Chapter 11: pick a bug from the zoo and inject it or not; the kernel prints the symptom and
    the diagnostic's verdict (tfx.zoo.bugzoo.frame), with a figure for some bugs."""
    from tfx.zoo.bugzoo import BUGS, frame

    style = {"description_width": "initial"}
    bug = widgets.ToggleButtons(
        options=list(BUGS), value=next(iter(BUGS)), description="bug", style=style
    )
    injected = widgets.Checkbox(value=True, description="injected", style=style)
    return _shell({"bug": bug, "injected": injected}, frame, [bug, injected])
