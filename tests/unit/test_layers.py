"""The import contracts of pyproject.toml's [tool.importlinter] hold: the kernel's layers
(network -> routing -> handlers -> replica -> log -> protocol, with the other modules
placed between), no plugin importing another, the kernel importing no plugin,
and plugins reaching the broker only through hooks and kernel.services."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    # no_cache: the check writes nothing into the work tree.
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                        no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report


def test_every_kernel_module_has_a_layer() -> None:
    """A new module or package of the kernel is placed in the layers, so none escapes
    the contract by being left out of it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["id"] == "kernel-layers"]
    placed = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    kernel = ROOT / "kernel"
    modules = {f"kernel.{p.stem}" for p in kernel.glob("*.py") if p.stem != "__init__"}
    packages = {f"kernel.{p.parent.name}" for p in kernel.glob("*/__init__.py")}
    assert modules | packages == placed
