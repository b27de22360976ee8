"""ARCHITECTURE.md stays true: the paths it names exist, its picture of the layers is
the layering pyproject.toml enforces, and it lists every import contract."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "ARCHITECTURE.md").read_text()
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"]
# A path in backquotes, from one of the project's top-level directories.
PATH = re.compile(r"`((?:kernel|plugins|spark|admin|bench|ops|reference|tests|docs)/"
                  r"[\w./-]*)`")


def _section(title: str) -> str:
    start = TEXT.index(f"## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start:end if end >= 0 else None]


def test_every_path_named_exists() -> None:
    named = set(PATH.findall(TEXT))
    assert len(named) > 40
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_picture_has_the_enforced_layers() -> None:
    layers = next(c for c in CONTRACTS if c["id"] == "kernel-layers")["layers"]
    enforced = {m.strip().removeprefix("kernel.") for layer in layers
                for m in layer.split("|")} - {"__main__", "cli", "testing"}
    picture = _section("The layers").split("```")[1]
    boxed = picture[picture.index("+--"):picture.rindex("+--")]
    drawn = set()
    for line in boxed.splitlines():
        if not line.strip().startswith("|"):
            continue
        names = line.strip().strip("|").split("  ")[0]
        drawn |= {n.strip() for n in names.split("|")}
    drawn.discard("")
    assert drawn == enforced
    # Each drawn row is one enforced layer, in order; the entry points (__main__, cli,
    # testing) sit above the box.
    rows = [tuple(n.strip() for n in line.strip().strip("|").split("  ")[0].split("|"))
            for line in boxed.splitlines() if line.strip().startswith("|")]
    expected = [tuple(m.strip().removeprefix("kernel.") for m in layer.split("|"))
                for layer in layers[2:]]
    assert rows == expected


def test_every_import_contract_is_in_the_table() -> None:
    table = _section("The plugin contract, as enforced")
    for contract in CONTRACTS:
        assert f"`{contract['id']}`" in table, contract["id"]


def test_every_kernel_api_module_is_in_the_table() -> None:
    table = _section("The plugin contract, as enforced")
    for module in sorted((ROOT / "kernel" / "api").glob("*.py")):
        if module.name != "__init__.py":
            assert f"`kernel/api/{module.name}`" in table, module.name


def test_every_test_directory_is_in_the_table() -> None:
    table = _section("Where the rest is")
    for directory in sorted((ROOT / "tests").iterdir()):
        if directory.is_dir() and not directory.name.startswith(("_", ".")):
            assert f"`tests/{directory.name}/`" in table, directory.name
