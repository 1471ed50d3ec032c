"""The project's setup files agree: pyproject.toml, environment.yml and the pinned constraints."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["dev"]


def _conda_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return [r for r in pip if not r.startswith("-")]


def test_environment_yml_names_the_same_packages_as_pyproject():
    assert {_name(r) for r in _pyproject()} == {_name(r) for r in _conda_pip()}


def test_every_dependency_is_pinned_and_torch_is_the_cpu_wheel_on_disk():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_name(name)] = version
    for r in _pyproject():
        assert _name(r) in pins, f"{r} is not pinned in constraints.txt"
    assert pins["torch"] == "2.13.0"
    assert pins["jupyter-book"].startswith("1.")
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()
    assert "torch==2.13.0" in _conda_pip()
