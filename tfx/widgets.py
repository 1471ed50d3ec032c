"""ipywidgets for the chapters. Each widget is a thin shell over a pure function that computes what it
shows, so the logic is tested without a browser and the widget cannot crash at its extremes.
"""

import ipywidgets as widgets


def forget_bias_widget():
    """Chapter 00: move the LSTM's forget-gate bias and watch its gradient against distance (vs attention)."""
    from tfx.rnn import forget_bias_report

    slider = widgets.IntSlider(
        value=0,
        min=0,
        max=10,
        step=1,
        description="forget-gate bias",
        style={"description_width": "initial"},
        continuous_update=False,
    )
    out = widgets.Output()

    def update(_=None):
        out.clear_output(wait=True)
        with out:
            print(forget_bias_report(slider.value))

    slider.observe(update, names="value")
    update()
    return widgets.VBox([slider, out])


def shapes_widget():
    """Chapter 01: sliders for L, d_model, heads and d_ff; the kernel prints tfx.flops.shapes_report."""
    from tfx.flops import shapes_report

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
    out = widgets.Output()

    def update(_=None):
        with out:
            out.clear_output(wait=True)
            print(shapes_report(**{k: s.value for k, s in sliders.items()}))

    for s in sliders.values():
        s.observe(update, names="value")
    update()
    return widgets.VBox(
        [widgets.HBox(list(sliders.values())[:2]), widgets.HBox(list(sliders.values())[2:]), out]
    )


def pe_widget(max_len: int = 64, d_model: int = 128):
    """Chapter 02: pick a position and a dimension, move the base; the kernel prints tfx.position.pe_report
    and redraws the table with the chosen entry marked."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    from tfx.position import pe_report, sinusoidal_encoding
    from tfx.viz import plot_pe

    position = widgets.IntSlider(
        0, min=0, max=max_len - 1, description="position", continuous_update=False
    )
    dim = widgets.IntSlider(0, min=0, max=d_model - 1, description="dim", continuous_update=False)
    base = widgets.FloatLogSlider(
        10000.0, base=10, min=1, max=6, step=0.25, description="base", continuous_update=False
    )
    out = widgets.Output()

    def update(_=None):
        with out:
            out.clear_output(wait=True)
            print(pe_report(position.value, dim.value, base.value, d_model))
            fig = plot_pe(
                sinusoidal_encoding(max_len, d_model, base.value), position.value, dim.value
            )
            display(fig)
            plt.close(fig)

    for w in (position, dim, base):
        w.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox([position, dim, base]), out])


def attention_perturbation_widget(mha, x, tokens, head_names=None):
    """Chapter 03: zero W_O, scale one head, change the softmax temperature, add noise to W_Q; the kernel
    recomputes the output norm, the cosine to the unperturbed output and the heatmaps of every head.
    """
    import matplotlib.pyplot as plt
    from IPython.display import display

    from tfx.probes import Perturbation, perturbation_effect
    from tfx.viz import attention_grid

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
    out = widgets.Output()

    def update(_=None):
        p = Perturbation(
            zero_wo=zero_wo.value,
            head=None if head.value < 0 else head.value,
            head_scale=scale.value,
            temperature=temp.value,
            wq_noise=noise.value,
        )
        r = perturbation_effect(mha, x, p)
        out.clear_output(wait=True)
        with out:
            print(r.report())
            fig = attention_grid(r.weights[0], tokens, col_names=names)
            display(fig)
            plt.close(fig)

    for control in (zero_wo, head, scale, temp, noise):
        control.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox([zero_wo, head, scale]), widgets.HBox([temp, noise]), out])


def gradient_check_widget():
    """Chapter 09: move the finite-difference step h and the precision; the kernel prints the gradient check."""
    from tfx.numpy_ref import gradient_check_report

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
    out = widgets.Output()

    def update(_=None):
        out.clear_output(wait=True)
        with out:
            print(gradient_check_report(slider.value, box.value))

    slider.observe(update, names="value")
    box.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox([slider, box]), out])
