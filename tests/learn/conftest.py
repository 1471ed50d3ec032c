"""Shared setup of tests/learn: a bench/ script run at its quick size, and its results file."""

import subprocess
import sys

import pytest

from tools.chapters import ROOT


def _run_bench(script: str, out, *args: str):
    """Run bench/<script> with args and --out out in a fresh interpreter, as a reader runs it (the
    test's imports and thread settings cannot leak into it); assert that it exits 0, showing the
    end of its stderr when not; return the one quick results file it wrote,
    out/<script's stem>-*-quick.json."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob(f"{script.removesuffix('.py')}-*-quick.json")
    return path


@pytest.fixture(scope="session")
def run_bench():
    """_run_bench, for the tests (and module-scoped fixtures) that check a bench script's output."""
    return _run_bench
