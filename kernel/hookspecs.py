"""Every hook Kafkernel calls. Plugins read them, and take ``hookimpl``, through
``kernel.api.hooks``: ``kernel.api`` is the whole contract between kernel and plugins.

A plugin is a module or a class (instantiated once per broker) with functions marked
``@hookimpl``. The kernel's own handlers are registered through these same hooks.
Hooks are synchronous; a hook with async work returns an awaitable that the kernel
awaits. ``kernel.plugins.PluginFacade`` has one typed method per hook, so callers never
spell ``pm.hook.<name>`` themselves.

Hooks are called through pluggy, so ``hookimpl(tryfirst=True)``, ``trylast`` and
``wrapper=True`` apply. Implementations are called in the order: the kernel, then the
plugins as ``[plugins] enabled`` lists them (tryfirst and trylast move one ahead or
behind). Registration hooks are called once per plugin, each with that plugin's own
view of the registry, which attributes what it registers to the plugin.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from kernel.cluster import MetadataBackend
    from kernel.config import ConfigSchema
    from kernel.coordination.registry import CoordinatorRegistry
    from kernel.requests import ApiRegistry, Session
    from kernel.sasl import SaslMechanismRegistry
    from kernel.services import PluginServices

PROJECT = "kafkernel"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# The one CLUSTER resource's name in authorization, as in Kafka's ACLs.
CLUSTER_NAME = "kafka-cluster"


# ---------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------


@hookspec
def kafkernel_config_schema() -> ConfigSchema | None:
    """Declare the keys of this plugin's TOML table ``[plugins.<name>]``.

    The kernel validates the table against the schema with the same rules as the
    broker's own settings (unknown key, wrong type: startup stops naming file and key).

    :returns: the schema, or None when the plugin takes no settings.
    """


@hookspec
def kafkernel_commands(subparsers: Any, load_config: Any) -> None:
    """Add this plugin's subcommands to ``kafkernel`` (``storage format``, say), on
    every installed plugin, enabled or not.

    :param subparsers: the ``kafkernel`` parser's argparse subparsers; a command sets
        ``func`` (args -> exit status).
    :param load_config: ``(path or None, overrides) -> BrokerConfig``: the broker's
        config read as ``serve`` reads it (raises ``ConfigError``).
    """


@hookspec
def kafkernel_configure(settings: Any, config: Any) -> None:
    """Receive this plugin's settings: its ``[plugins.<name>]`` table, under whatever
    name the plugin was enabled, validated and built by the schema it returned from
    ``kafkernel_config_schema`` (the schema's defaults when the file has no table).
    Called once per plugin, before every other lifecycle hook; None for a plugin
    without a schema. Keep them on the plugin object.

    :param config: the broker's :class:`~kernel.api.config.BrokerConfig` (take it only
        if needed), for checks across both; raise ``ConfigError`` naming the key to
        refuse a combination, as ``config check`` and start-up report it.
    """


@hookspec
def kafkernel_register_apis(registry: ApiRegistry) -> None:
    """Register request handlers with ``registry.register(api_key, handler, ...)``.

    :param registry: this plugin's view of the broker's routing table; a second claim
        on an API key stops startup.
    """


@hookspec
def kafkernel_register_coordinators(registry: CoordinatorRegistry) -> None:
    """Register the coordinator this plugin runs for a FindCoordinator key type with
    ``registry.register(CoordinatorType.GROUP, partition_of)``; the kernel serves
    FindCoordinator and asks ``partition_of(key)`` which internal-topic partition owns a
    key, then answers with its leader. A coordinator that keeps transactional state in
    its internal topic also passes ``topic=`` (that topic) and ``complete_transaction=``
    (a ``services.TransactionCompleter``): WriteTxnMarkers then hands it the markers for
    that topic instead of appending them to the log directly.

    :param registry: this plugin's view of the coordinators by key type; a second claim
        on a key type stops startup.
    """


@hookspec
def kafkernel_register_sasl_mechanisms(registry: SaslMechanismRegistry) -> None:
    """Offer SASL mechanisms with ``registry.register(name, factory, listeners=...)``
    (``PLAIN``, ``SCRAM-SHA-256``, ...): SaslHandshake answers a connection with its
    listener's. A SASL_* listener that no plugin offers a mechanism on, or one mechanism
    registered by two plugins, stops startup.

    :param registry: this plugin's view of the broker's mechanisms; ``registry.listeners``
        names the SASL listeners.
    """


# ---------------------------------------------------------------------------
# providers (firstresult)
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def kafkernel_metadata_backend(broker: PluginServices) -> MetadataBackend | None:
    """Provide the metadata backend; stops at first non-None result.

    Exactly one enabled plugin must answer (``metadata_kraft`` or ``metadata_zk``).

    :param broker: the broker being started, for its settings and data directory.
    """


@hookspec(firstresult=True)
def kafkernel_authorize(
    session: Session, operation: str, resource_type: str, resource_name: str
) -> bool | None:
    """Decide whether ``session.principal`` may perform ``operation`` (Kafka's ACL
    operation name: READ, WRITE, CREATE, DESCRIBE, ...) on a resource (TOPIC, GROUP,
    CLUSTER, TRANSACTIONAL_ID); the cluster's name is always ``CLUSTER_NAME``. Stops at
    first non-None result; with no authorizer enabled every operation is allowed.

    :returns: True to allow, False to deny, None to leave the decision to others.
    """


@hookspec(firstresult=True)
def kafkernel_authorize_by_resource_type(
    session: Session, operation: str, resource_type: str
) -> bool | None:
    """Decide whether ``session.principal`` may perform ``operation`` on at least one
    resource of ``resource_type`` (Kafka's Authorizer.authorizeByResourceType: an
    idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic).
    An authorizer that answers ``kafkernel_authorize`` answers this too; with none
    enabled it is allowed.

    :returns: True to allow, False to deny, None to leave the decision to others.
    """


# ---------------------------------------------------------------------------
# lifecycle
# ---------------------------------------------------------------------------


@hookspec
def kafkernel_startup(broker: PluginServices) -> Awaitable[None] | None:
    """Called once the kernel's components run (logs loaded, metadata published) and
    before listeners accept connections. Start plugin state here. What the plugins
    return is awaited one at a time in call order.

    :returns: an awaitable the kernel awaits before serving, or None.
    """


@hookspec
def kafkernel_shutdown(broker: PluginServices) -> Awaitable[None] | None:
    """Called after listeners stopped accepting, before logs are closed. What the
    plugins return is awaited in the reverse of the call order: the plugin that started
    last stops first (tryfirst here means stopping last).

    :returns: an awaitable the kernel awaits, or None.
    """


# ---------------------------------------------------------------------------
# observers: called on the event loop, must not block
# ---------------------------------------------------------------------------


@hookspec
def kafkernel_connection_opened(session: Session) -> None:
    """A client connected. ``session`` is the connection's state for its lifetime: it is
    authenticated already on PLAINTEXT listeners (as ``User:ANONYMOUS``), not yet on
    SASL_* ones, where the SASL plugin calls ``session.authenticate(principal)`` once
    the exchange succeeds. Plugins keep per-connection state in ``session.extensions``.
    """


@hookspec
def kafkernel_connection_closed(session: Session) -> None:
    """The connection of ``session`` closed (either side); a request of it still in
    flight was cancelled."""


@hookspec
def kafkernel_log_appended(topic: str, partition: int, base_offset: int, last_offset: int) -> None:
    """Records ``base_offset..last_offset`` were appended to a local log (leader or
    follower). Not yet committed: called before the high watermark can pass them; see
    ``kafkernel_high_watermark_changed``."""


@hookspec
def kafkernel_high_watermark_changed(topic: str, partition: int, high_watermark: int) -> None:
    """The partition's high watermark moved: records below it are committed and
    visible to consumers (a sink follows the log with this)."""


@hookspec
def kafkernel_segment_rolled(topic: str, partition: int, base_offset: int) -> None:
    """A new active segment starting at ``base_offset`` was created."""
