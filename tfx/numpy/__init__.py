"""The numpy twin (chapter 09): the encoder layer and its backward pass in numpy alone, and the
training pieces (Adam, the warm-up schedule, cross-entropy) written the same way.

May import: tfx.core. Never the torch model.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "numpy_ref": ["char_lm_forward", "erf", "init_layer_params", "layer_norm_std_eps"],
        "optim_np": [],
    },
)
