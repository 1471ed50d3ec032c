"""tests/widget_checks/NN_slug.yml (read by the JupyterLab browser test) is well formed and names a
chapter that exists, so a typo cannot make the browser test silently skip a widget."""

import re

import pytest
import yaml

from tools.chapters import ROOT, chapter_notebooks

CHECKS = sorted((ROOT / "tests" / "widget_checks").glob("*.yml"))
ACTIONS = {"click", "right", "left"}


@pytest.mark.parametrize("path", CHECKS, ids=[p.stem for p in CHECKS])
def test_widget_check_is_well_formed(path):
    assert path.stem in {p.stem for p in chapter_notebooks()}, (
        f"{path.name}: no notebooks/{path.stem}.ipynb"
    )
    steps = yaml.safe_load(path.read_text(encoding="utf-8"))["steps"]
    assert steps, f"{path.name}: no steps"
    for step in steps:
        assert step["action"] in ACTIONS, (
            f"{path.name}: action {step['action']!r} not in {sorted(ACTIONS)}"
        )
        assert isinstance(step["label"], str) and step["label"], path.name
        assert int(step.get("times", 1)) >= 1, path.name
        re.compile(step["expect"])
