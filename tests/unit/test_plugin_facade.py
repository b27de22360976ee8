"""The plugin facade calls hooks through pluggy: implementations answer in config order,
``tryfirst`` moves one ahead and a wrapper sees and changes the outcome."""

from __future__ import annotations

from kernel import handlers
from kernel.plugins import PluginFacade, installed_plugins, load_plugin
from kernel.requests import Session
from kernel.routing import Routes
from tests.plugin_fixtures.hello_plugin import NAME as HELLO
from tests.plugin_fixtures.session_plugins import Allows, Denies, DeniesFirst, HidesSecrets

SESSION = Session("127.0.0.1:1", "PLAINTEXT")


def _allowed(*enabled: str, topic: str = "t") -> bool:
    return PluginFacade(enabled, "test.toml", [handlers]).authorize(
        SESSION, "READ", "TOPIC", topic)


def test_plugins_answer_in_config_order_and_tryfirst_goes_ahead() -> None:
    assert _allowed(Allows.NAME, Denies.NAME)
    assert not _allowed(Denies.NAME, Allows.NAME)
    assert not _allowed(Allows.NAME, DeniesFirst.NAME)


def test_a_hookwrapper_changes_the_outcome() -> None:
    assert _allowed(Allows.NAME, HidesSecrets.NAME)
    assert not _allowed(Allows.NAME, HidesSecrets.NAME, topic="secret")
    assert not _allowed(HidesSecrets.NAME, topic="secret")  # wrapping no authorizer at all


def test_each_plugin_registers_through_its_own_view() -> None:
    routes = Routes()
    PluginFacade((HELLO,), "test.toml", [handlers]).register_apis(routes)
    owners = {r.api_key: r.owner for r in routes}
    assert owners[41] == HELLO
    assert owners[3] == owners[18] == "kernel"


def test_every_installed_plugin_can_be_introspected_before_it_starts() -> None:
    # pluggy 1.5 and 1.6 read every attribute of a plugin object when they register it
    # (getattr over dir()): a property that raises until startup stopped the broker
    # from starting with them. Read them all, as they do.
    for name in installed_plugins():
        plugin = load_plugin(name, "test.toml")
        for attribute in dir(plugin):
            try:
                getattr(plugin, attribute)
            except Exception as e:  # any error is the failure
                raise AssertionError(f"plugin {name!r}: reading {attribute!r} "
                                     f"raised {e!r}") from e
