"""Shared pytest setup: the repository root is importable (tests use tools/), and hypothesis runs
the same examples on every machine without a deadline (a 2-core CI runner is slow, not wrong)."""

import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile("tfx", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("tfx")

# The longest unit tests (up to a minute or more on CI's 2 cores) are handed out first, longest
# first. pytest-xdist deals the tests to its workers in collection order, so each worker starts on
# one of these while the short tests fill in around them; collected in place, one of them could
# start last and run on alone.
LONGEST_FIRST = (
    "test_recipe_reproduces_the_committed_start",
    "test_bench_finetune_quick_writes_results",
    "test_encoder_quick",
    "test_bench_tiny_records_every_variant",
)


def pytest_collection_modifyitems(config, items):
    # xdist deals the first tests round-robin: the two longest go to different workers
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: first.get(item.originalname, len(first))
    )  # stable: the rest keep order
