"""What request handlers and plugins see of the broker: two Protocols over the kernel's
components, so neither reaches the whole ``Broker`` (``kernel.server``).

``BrokerServices`` is what a handler reads through ``RequestContext.services``: the
cluster image and the metadata backend's changes, the replica manager, the log manager
(flush), the purgatories a handler waits in, the fetch session cache, the effective and
the loaded config, metrics, the logger and the routing table ApiVersions lists.
``PluginServices`` is what the lifecycle hooks (``kafkernel_metadata_backend``,
``kafkernel_startup``, ``kafkernel_shutdown``) get: the same plus a plugin's own
settings, the broker's registration and the timer. The broker satisfies both as it is
(no adapter on the request path); a test or a tool can hand a handler anything else
that does.

This module sits just above the components it names and imports nothing from the
layers that use it (routing, handlers, plugins, network, server): see
``[tool.importlinter]`` in pyproject.toml.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kernel.cluster import BrokerRegistration, MetadataBackend
from kernel.config import BrokerConfig, LoadedConfig
from kernel.fetch_session import FetchSessionCache
from kernel.log.manager import LogManager
from kernel.logging import Notices
from kernel.metrics import BrokerMetrics
from kernel.purgatory import Purgatory, Timer
from kernel.replica.manager import ReplicaManager
from kernel.replica.produce_append import TransactionVerifier

__all__ = [
    "BrokerServices",
    "CoordinatorLookup",
    "PluginServices",
    "ServedApi",
    "TransactionCompleter",
    "TransactionResult",
    "TransactionVerifier",
    "TxnMarker",
    "TxnMarkerResult",
]


class TransactionResult(enum.Enum):
    """How a transaction ended, as its marker (a control record) says. Defined here, below
    the coordination runtime (which re-exports it), so a marker can name it."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction marker to write, as one WriteTxnMarkers entry: the control record
    ``result`` for ``producer_id``/``producer_epoch`` on each of ``partitions``."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    """What writing one :class:`TxnMarker` did: Kafka's error code per (topic,
    partition) (``ErrorCode.none`` once the marker is committed there)."""

    producer_id: int
    errors: Mapping[tuple[str, int], ErrorCode] = field(default_factory=dict)


class ServedApi(Protocol):
    """One route of the routing table as ApiVersions lists it (a ``routing.ApiRoute``)."""

    @property
    def api_key(self) -> int: ...
    @property
    def advertised_min_version(self) -> int: ...
    @property
    def max_version(self) -> int: ...


class BrokerServices(Protocol):
    """The broker as a request handler sees it."""

    @property
    def config(self) -> BrokerConfig:
        """The effective broker config: the file's, with dynamic broker configs applied."""
        ...

    @property
    def loaded(self) -> LoadedConfig:
        """The config file as loaded (its source, static values and explicit keys)."""
        ...

    @property
    def metadata(self) -> MetadataBackend:
        """The metadata backend: ``.image`` is the current cluster image."""
        ...

    @property
    def replicas(self) -> ReplicaManager: ...
    @property
    def logs(self) -> LogManager: ...
    @property
    def produce_purgatory(self) -> Purgatory[Any]: ...
    @property
    def fetch_purgatory(self) -> Purgatory[Any]: ...
    @property
    def delete_records_purgatory(self) -> Purgatory[Any]: ...
    @property
    def fetch_sessions(self) -> FetchSessionCache:
        """The broker's KIP-227 incremental fetch sessions."""
        ...

    @property
    def metrics(self) -> BrokerMetrics: ...
    @property
    def log(self) -> Any:
        """The broker's structlog logger."""
        ...

    @property
    def refused_input_notices(self) -> Notices:
        """Rate limit for warnings about input a client can send on every request."""
        ...

    @property
    def routes(self) -> Iterable[ServedApi]:
        """The routing table, in API key order."""
        ...

    @property
    def coordinators(self) -> CoordinatorLookup:
        """The coordinator plugins registered per FindCoordinator key type."""
        ...


TransactionCompleter = Callable[
    [int, int, int, int, TransactionResult, int], Awaitable[None]]
"""(partition, producer id, producer epoch, coordinator epoch, result, timeout ms): a
coordinator writes a transaction marker into a partition of its internal topic and
applies it (Kafka's ``GroupCoordinator.completeTransaction``); resolves once committed,
else raises ``KafkaError`` (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...)."""


class CoordinatorLookup(Protocol):
    """The coordinators plugins registered, by FindCoordinator key type
    (a ``coordination.registry.Coordinators``)."""

    def get(self, key_type: int) -> Callable[[str], tuple[str, int]] | None:
        """The key -> (internal topic, partition) function of that key type's coordinator."""
        ...

    def transaction_completer(self, topic: str) -> TransactionCompleter | None:
        """How markers reach ``topic`` when a coordinator owns it (its internal topic),
        else None: the marker is appended to the log directly."""
        ...

    def internal_topics(self) -> Iterable[str]:
        """The internal topics of the registered coordinators."""
        ...

    def transaction_verifier(self) -> TransactionVerifier | None:
        """The transaction coordinator's verification, when one is registered."""
        ...


class PluginServices(BrokerServices, Protocol):
    """The broker as a plugin's lifecycle hooks see it. ``metadata`` exists once the
    backend started: not yet in ``kafkernel_metadata_backend``."""

    @property
    def registration(self) -> BrokerRegistration | None:
        """How clients reach this broker; resolved once the listeners are bound."""
        ...

    @property
    def timer(self) -> Timer:
        """The broker's timing wheel, shared by every delayed operation."""
        ...


    def send_to_broker(self, broker_id: int, request: Any) -> Awaitable[Any]:
        """Send a kio request to another broker over the inter-broker listener and
        return its response body (Kafka's inter-broker send threads): how a coordinator
        reaches the leaders of partitions led elsewhere. Raises
        ``kernel.protocol.client.BrokerConnectionError`` when that broker is not
        registered, cannot be reached or does not answer in time."""
        ...

    def write_txn_markers(self, markers: Sequence[TxnMarker]) -> Awaitable[list[TxnMarkerResult]]:
        """Write each marker to its partitions led here, as WriteTxnMarkers does (the
        transaction coordinator's path to the logs): a result per marker, in order, once
        every marker is committed (acks=all) or has failed: NOT_LEADER_OR_FOLLOWER for a
        partition this broker follows, UNKNOWN_TOPIC_OR_PARTITION for one it has no
        replica of (as Kafka), the log's refusal (TRANSACTION_COORDINATOR_FENCED,
        INVALID_PRODUCER_EPOCH, ...), REQUEST_TIMED_OUT when not committed within
        request.timeout.ms (30 s)."""
        ...
