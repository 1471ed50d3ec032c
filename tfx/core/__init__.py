"""What every layer shares: argument checks with one clear message each, shape printing and
tracing, numbers a checked cell can print on any CPU, and the book's running example.

May import: torch and numpy only; no other part of tfx.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "checks": [],
        "example": [
            "build_vocab",
            "padded_example",
            "RUNNING_EXAMPLE",
            "running_example_ids",
            "SHORT_EXAMPLE",
            "SPECIAL_TOKENS",
        ],
        "shapes": ["show", "trace"],
        "stable": ["below"],
    },
)
