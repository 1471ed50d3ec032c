"""The reader's side: plots, widgets and source listings. matplotlib and ipywidgets are imported
here only.

May import: everything in tfx; nothing in tfx imports it.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "figures": ["book_figures"],
        "source": ["show_source"],
        "viz": [
            "attention_grid",
            "drawn_blocks",
            "embedding_diagram",
            "encoder_wiring",
            "ffn_diagram",
            "plot_curves",
            "plot_head_split",
            "plot_histograms",
            "plot_pe",
            "two_over_one",
        ],
        "widgets": [
            "attention_perturbation_widget",
            "bug_zoo_widget",
            "ffn_widget",
            "forget_bias_widget",
            "gradient_check_widget",
            "gradient_flow_widget",
            "layernorm_residual_widget",
            "masked_lm_widget",
            "pe_widget",
            "position_widget",
            "precision_widget",
            "sentiment_widget",
            "shapes_widget",
        ],
    },
)
