"""What the bench scripts share: the two flags every one takes, and where its results go.

A script imports it as `from bench._common import ...` once it has put the repository root on
sys.path. bench/gpu.py does not: it runs alone on a GPU machine, torch + stdlib only.
"""

import argparse
import datetime
from pathlib import Path

from tfx.inspect.perf import RESULTS, write_results


def arguments(description: str, *quick: str, help: str = None) -> argparse.ArgumentParser:
    """A parser with the script's quick mode (the flags in `quick`, e.g. "--tiny", "--quick") and
    --out, the results folder (default bench/results); the script adds its own flags."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(*quick, action="store_true", help=help)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    return parser


def save(results: dict, name: str, markdown: str, out: Path, *tags: str, day: str = None) -> Path:
    """tfx.inspect.perf.write_results as <name>-<day>[-<tag>...].json and .md in `out`; day: today
    by default; empty tags are left out. A quick run's tag is "quick": tfx.inspect.perf.latest
    passes those files over. Returns the JSON path."""
    day = day or datetime.date.today().isoformat()
    return write_results(results, "-".join([name, day, *filter(None, tags)]), markdown, out)
