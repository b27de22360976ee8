"""The import contracts of pyproject.toml's [tool.importlinter] hold: the kernel's layers
(network -> routing -> handlers -> replica -> log -> protocol, with the other modules
placed between), no plugin importing another, the kernel importing no plugin, and
plugins, spark and admin importing only kernel.api of the kernel."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    # no_cache: the check writes nothing into the work tree.
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                        no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report


def _contract(contract_id: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == contract_id]
    return contract


def _kernel_top_level() -> set[str]:
    """Every module and package directly under kernel/."""
    kernel = ROOT / "kernel"
    modules = {f"kernel.{p.stem}" for p in kernel.glob("*.py") if p.stem != "__init__"}
    packages = {f"kernel.{p.parent.name}" for p in kernel.glob("*/__init__.py")}
    return modules | packages


def test_every_kernel_module_has_a_layer() -> None:
    """A new module or package of the kernel is placed in the layers, so none escapes
    the contract by being left out of it."""
    layers = _contract("kernel-layers")
    placed = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    assert _kernel_top_level() == placed


def test_plugins_may_import_only_kernel_api() -> None:
    """The plugin contract is an allow-list written as a forbidden contract: every
    kernel module but kernel.api is in it, so a new kernel module is closed to plugins
    until someone offers it through kernel.api."""
    contract = _contract("plugins-through-the-api")
    assert set(contract["source_modules"]) == {"plugins", "spark", "admin"}
    assert contract["allow_indirect_imports"] is True
    forbidden = set(contract["forbidden_modules"])
    assert forbidden == _kernel_top_level() - {"kernel.api"}


def test_the_readme_plugin_example_imports_only_kernel_api() -> None:
    """The example a plugin author copies (the README's, kept equal to the tested plugin
    by test_docs) is outside the import contracts' packages: read its imports here."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Writing a plugin"):]
    example = section[section.index("```python\n") + len("```python\n"):]
    example = example[:example.index("```")]
    imported = set()
    for node in ast.walk(ast.parse(example)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    kernel = {m for m in imported if m == "kernel" or m.startswith("kernel.")}
    assert kernel and all(m.startswith("kernel.api.") for m in kernel), sorted(kernel)
