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
