"""tfx: the helper package of the book. Import is cheap: submodules load on first use."""

import importlib
import logging
import os
import random

import numpy as np
import torch

__version__ = "0.1.0"

# transformers imports torchao (installed for chapter 08) the first time it builds a model. The
# import names each CUDA library it could not load, and torch's pytree logs deprecation warnings
# for torchao's enums, every line with a clock time and a process id: noise on a chapter's page
# that would also make two executions differ. Errors still show.
logging.getLogger("torchao").setLevel(logging.ERROR)
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

_SUBMODULES = {
    "attention",
    "bert",
    "book_model",
    "bugs",
    "bugzoo",
    "checks",
    "compress",
    "corpus",
    "data",
    "diagnose",
    "efficient",
    "ffn",
    "finetune",
    "flops",
    "grads",
    "layers",
    "mlm",
    "mlm_eval",
    "numpy_ref",
    "optim_np",
    "position",
    "probes",
    "reviews",
    "rnn",
    "shapes",
    "source",
    "stable",
    "stack",
    "timing",
    "train",
    "viz",
    "warmup",
    "widgets",
}


def set_seed(seed: int = 0) -> None:
    """Seed python, numpy and torch, so a cell prints the same numbers on every run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)


def banner() -> None:
    """Print the versions a chapter's outputs were made with (the first code cell of each chapter).

    Versions come from package metadata, so the banner imports nothing heavy (transformers is slow).
    """
    import platform
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"Python {platform.python_version()}"]
    for pkg in ("torch", "numpy", "transformers"):
        try:
            parts.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            parts.append(f"{pkg} (not installed)")
    print(" · ".join(parts))


def get_device() -> torch.device:
    """cuda when a GPU is visible, else cpu: chapters run everywhere and say which one they used."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def __getattr__(name):
    # lazy submodules keep `import tfx` fast and let an optional extra (matplotlib, ipywidgets)
    # be missing
    if name in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'tfx' has no attribute {name!r}")


__all__ = ["set_seed", "banner", "get_device", "__version__", *sorted(_SUBMODULES)]
