"""tfx: the helper package of the book. Import is cheap: submodules load on first use."""

import importlib
import logging
import os
import random
import sys

import numpy as np
import torch

__version__ = "0.1.0"

# transformers imports torchao (installed for chapter 08) the first time it builds a model. The
# import names each CUDA library it could not load, and torch's pytree logs deprecation warnings
# for torchao's enums, every line with a clock time and a process id: noise on a chapter's page
# that would also make two executions differ. Errors still show.
logging.getLogger("torchao").setLevel(logging.ERROR)
logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

# The layers of the package, lowest first (CONTRIBUTING.md has the map; `make lint` checks that
# each imports only the ones below it).
_SUBPACKAGES = ("core", "model", "numpy", "inspect", "learn", "zoo", "book")


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


def lazy_exports(package: str, modules: dict) -> tuple:
    """`__getattr__`, `__dir__` and `__all__` for a subpackage whose names load on first use.

    `modules` maps each module of the package to the names it lends the package, so a chapter
    writes `from tfx.model import BertConfig` without knowing the file, and the package's
    `__init__` says where each name lives. Lazy because importing a package must stay cheap:
    `from tfx.book import show_source` must not pull in matplotlib.
    """
    where = {name: module for module, names in modules.items() for name in names}
    clash = sorted(set(where) & set(modules))
    if clash:  # importing the module would rebind the name to it
        raise ValueError(f"{package}: names {clash} are also modules of the package")

    def __getattr__(name):
        if name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    names = sorted(where)
    return __getattr__, lambda: names + sorted(modules), names


def __getattr__(name):
    # lazy subpackages keep `import tfx` fast and let an optional extra (matplotlib, ipywidgets)
    # be missing
    if name in _SUBPACKAGES:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'tfx' has no attribute {name!r}")


__all__ = ["set_seed", "banner", "get_device", "lazy_exports", "__version__", *_SUBPACKAGES]
