"""The handler contract: what a request handler, the kernel's or a plugin's, is given and
registers through. ``RequestContext`` (the broker's services, the authorizer, the
connection's session and the request header), ``Session`` (per-connection state and its
authentication), ``Handler`` and ``ApiRegistry`` (a plugin's view of the routing table).

It sits below the handlers and above the services they use; the table itself and the
dispatch through it (``kernel.routing``, ``kernel.network``) sit above the handlers, so
a request goes network -> routing -> handler and no handler imports either (see
``[tool.importlinter]`` in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from kernel.protocol.codec import RecentResponses
from kernel.services import BrokerServices

ANONYMOUS = "User:ANONYMOUS"
# Security protocols whose connections are authenticated as soon as they open, as
# ANONYMOUS (Kafka's principal without SASL or a TLS client certificate). On SASL_* ones
# the SASL plugin authenticates the session once its exchange completes.
AUTHENTICATED_AT_OPEN = frozenset({"PLAINTEXT", "SSL"})


@dataclass(slots=True)
class Session:
    """Per-connection state that outlives one request (authentication, client info).

    A session starts unauthenticated: until ``authenticate`` only ApiVersions,
    SaslHandshake and SaslAuthenticate are served, as Kafka does."""

    peer: str
    listener_name: str
    security_protocol: str = "PLAINTEXT"
    principal: str | None = None
    authenticated: bool = False
    credential_expires_at_ms: int | None = None
    # KIP-368: when the SASL session ends (time.monotonic() seconds), None for never.
    # After it the kernel serves only ApiVersions and the SASL APIs (re-authentication)
    # and closes the connection on any other request, as Kafka does.
    session_expires_at: float | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    # Plugins keep their per-connection state here, keyed by plugin name.
    extensions: dict[str, Any] = field(default_factory=dict)
    # Set by a handler whose response must be the connection's last (a failed SASL
    # authentication: Kafka answers with the error, then closes).
    close_after_response: bool = False
    # Set by the dispatcher when a client quota throttles the answer (KIP-219): once the
    # answer is written the connection reads nothing for this many ms.
    throttle_after_response_ms: int = 0
    # Set by a SASL plugin that accepted a SaslHandshake v0 (KIP-43): until the exchange
    # completes, every frame on the connection is a raw SASL token, not a request. The
    # kernel gives each token to it and sends the answer back size-prefixed; raising
    # InvalidRequest (or an awaitable that raises it) closes the connection.
    raw_sasl_token: Callable[[bytes], bytes | Awaitable[bytes]] | None = None

    def authenticate(self, principal: str, *, expires_at_ms: int | None = None) -> None:
        """The connection's client is ``principal`` from now on: set at open by the
        kernel where the security protocol authenticates (``AUTHENTICATED_AT_OPEN``), by
        the SASL plugin when its exchange succeeds. ``expires_at_ms`` is when the
        credential stops being valid (an OAUTHBEARER token's exp), for KIP-368's session
        lifetime."""
        self.principal = principal
        self.authenticated = True
        self.credential_expires_at_ms = expires_at_ms


Authorize = Callable[[Session, str, str, str], bool]
"""(session, operation, resource type, resource name) -> allowed: the enabled authorizer
(the ``kafkernel_authorize`` hook), as Kafka's handlers ask it."""


AuthorizeByResourceType = Callable[[Session, str, str], bool]
"""(session, operation, resource type) -> whether the session may perform the operation
on at least one resource of the type: Kafka's authorizeByResourceType, which lets an
idempotent producer in with WRITE on any topic (KIP-679)."""


def _no_authorizer(session: Session, operation: str, resource_type: str) -> bool:
    return True


class ControllerMutationQuota(Protocol):
    """KIP-599's controller_mutation_rate for one request (Kafka's ControllerMutationQuota):
    CreateTopics, CreatePartitions and DeleteTopics record the partitions each topic
    creates or deletes, in request order, as Kafka's controller does."""

    def record(self, partitions: int) -> None:
        """Count ``partitions`` against the client's quota, or raise
        KafkaError(THROTTLING_QUOTA_EXCEEDED) where a strict quota (the APIs' newer
        versions) is already used up: that topic is then refused."""
        ...


class _UnboundedMutationQuota:
    """No controller_mutation_rate applies (Kafka's UnboundedControllerMutationQuota)."""

    __slots__ = ()

    def record(self, partitions: int) -> None:
        return None


UNBOUNDED_MUTATION_QUOTA: ControllerMutationQuota = _UnboundedMutationQuota()


@dataclass(slots=True)
class RequestContext:
    """Everything a handler knows about the request besides its decoded body: the
    broker's services (not the broker), the connection's session and the authorizer."""

    services: BrokerServices
    authorize: Authorize
    session: Session
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Size of the whole request frame, for metrics and quotas.
    size: int = 0
    # The authorizer's answer for a resource type (the dispatcher always sets it; the
    # default, as with no authorizer enabled, allows).
    authorize_by_resource_type: AuthorizeByResourceType = _no_authorizer
    # The connection's broker's responses built before (the dispatcher's), for handlers
    # whose answers repeat.
    recent_responses: RecentResponses = field(default_factory=RecentResponses)
    # The client's controller_mutation_rate, set by the dispatcher for the APIs it
    # applies to (CreateTopics, CreatePartitions, DeleteTopics) when such a quota is set.
    mutation_quota: ControllerMutationQuota = UNBOUNDED_MUTATION_QUOTA
    # Set by a handler whose answer holds thousands of entries (one it built in slices):
    # the dispatcher encodes it in a codec thread, as it does the answer to a big frame.
    big_answer: bool = False


Response = Any  # a kio response entity of the request's version
HandlerResult = Response | None | Awaitable[Response | None]
Handler = Callable[[RequestContext, Any], HandlerResult]
"""A handler takes the context and the decoded kio request entity and returns the kio
response entity of the same version, an awaitable of it, or None for no response
(Produce with acks=0). Raising ``KafkaError`` answers with that error code where the
response has a top-level error code; any other exception closes the connection."""


# A listener's role, as Kafka's schemas name them ("listeners"): controller when its name
# is in controller.listener.names, else broker.
BROKER = "broker"
CONTROLLER = "controller"
LISTENER_ROLES = (BROKER, CONTROLLER)


class ApiRegistry(Protocol):
    """One plugin's view of the broker's routing table (``routing.Routes``), given to
    its ``kafkernel_register_apis`` hook: what it registers is its own, and a second
    claim on an API key for one listener role stops startup."""

    def register(
        self, api_key: int, handler: Handler, *, min_version: int, max_version: int,
        advertised_min_version: int | None = None, listeners: Iterable[str] = (BROKER,),
    ) -> None:
        """``advertised_min_version`` (default ``min_version``) is the lowest version
        ApiVersions lists; requests below ``min_version`` are refused all the same.
        ``listeners``: the roles of the listeners that serve it (``BROKER``,
        ``CONTROLLER`` or both); a listener of another role closes the connection of a
        client that asks for it, as Kafka does for an API not enabled on a listener."""
        ...


def register_handler_modules(registry: ApiRegistry, modules: Iterable[ModuleType],
                             service: Callable[[], Any] | None = None) -> None:
    """Register handler modules that each serve one API key: ``API_KEY``,
    ``MIN_VERSION``, ``MAX_VERSION``, ``ADVERTISED_MIN_VERSION`` where ApiVersions lists
    more than is served, ``LISTENERS`` where not only broker listeners serve it, and
    ``handle``. ``handle(ctx, request)`` is the
    :data:`Handler` itself (the kernel's modules); with ``service`` it is
    ``handle(service, ctx, request)``, ``service()`` read per request, since a plugin's
    service exists only once it started."""
    for module in modules:
        handler = module.handle if service is None else _bound(module.handle, service)
        registry.register(module.API_KEY, handler,
                          min_version=module.MIN_VERSION, max_version=module.MAX_VERSION,
                          advertised_min_version=getattr(module, "ADVERTISED_MIN_VERSION",
                                                         None),
                          listeners=getattr(module, "LISTENERS", (BROKER,)))


def _bound(handle: Callable[[Any, RequestContext, Any], Any],
           service: Callable[[], Any]) -> Handler:
    def handler(ctx: RequestContext, request: Any) -> Any:
        return handle(service(), ctx, request)

    return handler
