"""What request handlers and plugins see of the broker: Protocols over the kernel's
components, so none of them reaches the whole ``Broker`` (``kernel.server``).

``RequestServices`` is what every handler, the kernel's or a plugin's, reads through
``RequestContext.services``: the effective and the loaded config, the metadata backend
(its cluster image), metrics, the logger and the registered coordinators.
``BrokerServices`` adds what only the kernel's handlers use: the replica manager, the
log manager (flush), the purgatories a handler waits in, the fetch session cache and the
routing table ApiVersions lists. ``PluginServices`` is what the lifecycle hooks
(``kafkernel_metadata_backend``, ``kafkernel_startup``, ``kafkernel_shutdown``) get:
``RequestServices`` plus the broker's registration, the timer, inter-broker requests,
transaction markers, a :class:`PartitionWriter` and a read-only :class:`PartitionView`
per local replica; never the replica or log manager. The broker satisfies all three as
it is (no adapter on the request path); a test or a tool can hand a handler anything
else that does.

This module sits just above the components it names and imports nothing from the
layers that use it (routing, handlers, plugins, network, server): see
``[tool.importlinter]`` in pyproject.toml.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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

if TYPE_CHECKING:
    from kernel.replica.leadership import LeadershipListener

__all__ = [
    "BrokerServices",
    "CommitWait",
    "CoordinatorLookup",
    "PartitionView",
    "PartitionWriter",
    "PluginServices",
    "RequestServices",
    "ServedApi",
    "TopicPartition",
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


class RequestServices(Protocol):
    """The broker as every request handler, the kernel's or a plugin's, sees it."""

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
    def metrics(self) -> BrokerMetrics: ...
    @property
    def log(self) -> Any:
        """The broker's structlog logger."""
        ...

    @property
    def coordinators(self) -> CoordinatorLookup:
        """The coordinator plugins registered per FindCoordinator key type."""
        ...


class BrokerServices(RequestServices, Protocol):
    """The broker as the kernel's request handlers see it: the components plugins do
    not reach."""

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
    def refused_input_notices(self) -> Notices:
        """Rate limit for warnings about input a client can send on every request."""
        ...

    def routes_for(self, listener_name: str) -> Iterable[ServedApi]:
        """The routes served on the listener named ``listener_name`` (its role's
        table), in API key order."""
        ...


TopicPartition = tuple[str, int]


class PartitionView(Protocol):
    """A local replica as a plugin reads it (a ``replica.partition.Partition``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def is_leader(self) -> bool: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def high_watermark(self) -> int:
        """Records below it are committed and visible to consumers."""
        ...


class CommitWait(Protocol):
    """A wait started by :meth:`PartitionWriter.wait_until_committed`."""

    @property
    def is_completed(self) -> bool: ...

    def force_complete(self) -> bool:
        """End the wait now (its callback runs with whether the offset is committed);
        False when it had already ended."""


class PartitionWriter(Protocol):
    """What a coordinator writes its internal topic through (Kafka's ``PartitionWriter``
    with what its ``CoordinatorLoader`` reads): ``PluginServices.partition_writer()``
    gives the kernel's, over the replica manager."""

    def append(self, tp: TopicPartition, records: bytes) -> int:
        """Append ``records`` (batches whose offsets the log assigns) to the local
        leader replica with acks=all's checks (min.insync.replicas must hold); returns
        the offset after the last record. Raises ``KafkaError`` and appends nothing
        when the replica is not leader or the append is refused."""

    def high_watermark(self, tp: TopicPartition) -> int:
        """The local replica's high watermark; KafkaError when it is not hosted here."""

    def wait_until_committed(self, tp: TopicPartition, offset: int, timeout_ms: int,
                             on_done: Callable[[bool], None]) -> CommitWait:
        """Call ``on_done(True)`` once the high watermark reaches ``offset`` (perhaps
        before returning), ``on_done(False)`` after ``timeout_ms`` without. Waits on
        one partition end in the order they started when one high-watermark move ends
        several."""

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        """Hear the current role of every local replica now, then each change."""

    def remove_leadership_listener(self, listener: LeadershipListener) -> None: ...

    # -- loading (Kafka's CoordinatorLoader reads the log through these) ----------------

    def log_start_offset(self, tp: TopicPartition) -> int: ...

    def log_end_offset(self, tp: TopicPartition) -> int: ...

    def read(self, tp: TopicPartition, offset: int, max_bytes: int) -> bytes | memoryview:
        """Whole batches from ``offset`` on (at least one, even when larger than
        ``max_bytes``), up to the log end: a load replays above the high watermark."""


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


class PluginServices(RequestServices, Protocol):
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

    def partition_writer(self) -> PartitionWriter:
        """The kernel's writer over this broker's replicas, for a coordinator's internal
        topic: its appends take the one append path a Produce takes."""
        ...

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        """The local replica of ``topic``-``partition``, or None when this broker hosts
        none."""
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
