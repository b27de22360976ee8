"""The documentation tells the truth: every hook documented, every config key in the
README, and the README's plugin example is the file the tests load."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from kernel import hookspecs
from kernel.config import BrokerConfig, schema_keys, to_kafka_string
from reference.fetch import kafka_version
from reference.kafka import HEAP

ROOT = Path(__file__).resolve().parents[2]


def test_every_hook_is_documented() -> None:
    hooks = [f for name, f in vars(hookspecs).items() if name.startswith("kafkernel_")]
    assert hooks
    for hook in hooks:
        doc = inspect.getdoc(hook)
        assert doc and len(doc) > 40, f"{hook.__name__} needs a docstring"


def test_readme_documents_every_broker_key_with_its_default() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9.]+)` \| \w+ \| ([^|]*) \|", readme, re.M))
    for key in schema_keys(BrokerConfig).values():
        assert key.name in rows, f"README lacks config key {key.name}"
        expected = to_kafka_string(key.default)
        assert rows[key.name].strip() == (expected if expected is not None else "null"), key.name


def test_readme_plugin_example_is_the_tested_plugin() -> None:
    readme = (ROOT / "README.md").read_text()
    example = (ROOT / "tests" / "plugin_fixtures" / "hello_plugin.py").read_text()
    assert example in readme


def test_readme_names_the_reference_kafka_version_and_heap() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"**Apache Kafka {kafka_version()}**" in readme
    assert f".cache/kafka-{kafka_version()}/libs" in readme
    assert f"`-Xms{HEAP} -Xmx{HEAP}`" in readme


def test_every_enable_snippet_keeps_the_shipped_plugins() -> None:
    """Copied literally, an `enabled` list without `txn` makes every idempotent producer
    (every current client's default) fail: each snippet keeps kafkernel.toml's list."""
    import tomllib

    shipped = tomllib.loads((ROOT / "kafkernel.toml").read_text())["plugins"]["enabled"]
    texts = [(ROOT / "README.md").read_text(),
             (ROOT / "tests" / "plugin_fixtures" / "hello_plugin.py").read_text()]
    snippets = [m.group(1) for text in texts
                for m in re.finditer(r"enabled = (\[[^\]]*\])", text) if m.group(1) != "[...]"]
    assert len(snippets) >= 4
    for snippet in snippets:
        names = [n.strip().strip('"') for n in snippet.strip("[]").split(",") if n.strip()]
        backend = next(n for n in names if n.startswith("metadata_"))
        expected = [backend if n == "metadata_kraft" else n for n in shipped]
        assert set(expected) <= set(names), f"{snippet} drops one of {expected}"
