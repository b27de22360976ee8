"""The plugin object: one instance per broker, holding that broker's ACL index (rebuilt
from the metadata backend's ACLs whenever they change) and its authorizer settings."""

from __future__ import annotations

from typing import Any

import structlog
from prometheus_client import Counter, Gauge

from kernel.api.cluster import MetadataBackend
from kernel.api.config import ConfigSchema
from kernel.api.handlers import ApiRegistry, Session
from kernel.api.hooks import hookimpl
from kernel.api.services import PluginServices
from plugins.acl import apis
from plugins.acl.authorizer import (
    AclIndex,
    decide,
    decide_by_resource_type,
    parse_super_users,
)
from plugins.acl.codes import AclOperation, ResourceType
from plugins.acl.settings import AclSettings

__all__ = ["PLUGIN_NAME", "AclPlugin"]

PLUGIN_NAME = "acl"
# A session that has not authenticated yet asks nothing of the authorizer (the kernel
# serves it only ApiVersions and SASL); the principal of one that has no name is Kafka's.
_ANONYMOUS = "User:ANONYMOUS"


class AclPlugin:
    def __init__(self) -> None:
        self._metadata: MetadataBackend | None = None
        self._settings = AclSettings()
        self._super_users: frozenset[str] = frozenset()
        self._index = AclIndex()
        self._indexed: Any = None  # the backend's ACL mapping the index was built from
        self._log: Any = structlog.get_logger().bind(component=PLUGIN_NAME)
        self._allowed: Counter | None = None
        self._denied: Counter | None = None

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{PLUGIN_NAME}", AclSettings)

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        apis.register(registry, self.metadata)

    def metadata(self) -> MetadataBackend:
        """Set at startup; listeners serve only after that, so handlers always find it.
        A method, not a property that raises: pluggy reads every attribute of a plugin
        object when it registers it."""
        if self._metadata is None:
            raise RuntimeError("the acl plugin has not started")
        return self._metadata

    @hookimpl
    def kafkernel_configure(self, settings: AclSettings) -> None:
        self._settings = settings

    @hookimpl
    def kafkernel_startup(self, broker: PluginServices) -> None:
        self._super_users = parse_super_users(self._settings.super_users)
        self._metadata = broker.metadata
        self._log = broker.log.bind(component=PLUGIN_NAME)
        registry = broker.metrics.registry
        # Kafka's authorizer metrics (KIP-801): decisions, and the ACLs it holds.
        self._allowed = Counter("kafkernel_authorizer_allowed",
                                "Authorization decisions that allowed.", registry=registry)
        self._denied = Counter("kafkernel_authorizer_denied",
                               "Authorization decisions that denied.", registry=registry)
        Gauge("kafkernel_acls", "ACLs in the metadata log.",
              registry=registry).set_function(lambda: len(self.metadata().acls()))

    def _current(self) -> AclIndex:
        """The index of the backend's ACLs, rebuilt when they changed (the backend
        replaces its mapping on a change, so one identity test per decision suffices)."""
        acls = self.metadata().acls()
        if acls is not self._indexed:
            self._index = AclIndex(acls.values())
            self._indexed = acls
        return self._index

    @hookimpl
    def kafkernel_authorize(self, session: Session, operation: str, resource_type: str,
                            resource_name: str) -> bool:
        principal = session.principal or _ANONYMOUS
        host = _host(session)
        decision = decide(self._current(), self._super_users,
                          self._settings.allow_everyone_if_no_acl_found, principal, host,
                          AclOperation[operation], ResourceType[resource_type],
                          resource_name)
        if decision.allowed:
            if self._allowed is not None:
                self._allowed.inc()
        else:
            if self._denied is not None:
                self._denied.inc()
            # Kafka's authorizer logger, at DEBUG here: Metadata asks for every topic and
            # most denials are that filtering, not a refused request.
            self._log.debug("authorization denied", principal=principal, host=host,
                            operation=operation, resource_type=resource_type,
                            resource=resource_name, reason=decision.reason)
        return decision.allowed

    @hookimpl
    def kafkernel_authorize_by_resource_type(self, session: Session, operation: str,
                                             resource_type: str) -> bool:
        principal = session.principal or _ANONYMOUS
        return decide_by_resource_type(
            self._current(), self._super_users, self._settings.allow_everyone_if_no_acl_found,
            principal, _host(session),
            AclOperation[operation], ResourceType[resource_type])



def _host(session: Session) -> str:
    """The client's address without its port, as ACL hosts name it."""
    return session.peer.rpartition(":")[0] or session.peer
