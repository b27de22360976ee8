"""A controller-only node (``process.roles=controller``) of a static quorum
(``controller.quorum.voters``): the Raft node on Kafka's metadata log, its driver, the
idle NoOp writer and the image replayed from committed records. It is the node's
metadata backend. While it leads, its :class:`~..controller.quorum_controller.QuorumController`
is active and serves the brokers' requests on the controller listener
(``controller/apis.py``); a change a broker listener would ask for answers NOT_CONTROLLER
(no broker listener reaches this node).

On disk, as Kafka's controller: ``<metadata.log.dir>/__cluster_metadata-0/`` holds the
segments and ``quorum-state``; ``meta.properties`` ties the directory to a cluster id
(write the same one on every voter, as ``kafka-storage format`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from kernel.api.cluster import ClusterImage, ImageListener
from kernel.api.errors import ErrorCode, KafkaError

from ..controller.quorum_controller import QuorumController
from ..controller.state import ControllerState
from ..features import SUPPORTED_FEATURES
from ..image import MetadataDelta, RegisteredBroker, empty_image
from ..image_records import MetadataState
from ..log import MetadataLogError
from ..properties import ensure_meta_properties
from ..records.codec import RecordDecodeError, UnsupportedVersionError
from ..records.schema import NoOpRecord
from ..records.serde import ApiMessageAndVersion, decode_batches, encode_value
from . import messages as m
from . import quorum_store
from .core import RaftNode
from .driver import RaftDriver
from .kafka_log import KafkaRaftLog
from .snapshotting import QuorumSnapshotter
from .state import Leader, RaftConfig, VoterSet

__all__ = ["QuorumNode"]

METADATA_PARTITION_DIR = "__cluster_metadata-0"
_NOOP = encode_value(ApiMessageAndVersion(NoOpRecord(), 0))
_READ_BYTES = 8 * 1024 * 1024


class QuorumNode:
    """The metadata backend of a controller-only node: runs the quorum."""

    def __init__(self, *, node_id: int, voters: dict[int, tuple[str, int]],
                 listener_name: str, metadata_log_dir: Path, raft_config: RaftConfig,
                 idle_interval_ms: int, logger: Any, session_timeout_ms: int = 9000,
                 heartbeat_interval_ms: int = 2000,
                 max_record_bytes_between_snapshots: int = 20 * 1024 * 1024) -> None:
        self.node_id = node_id
        self._voters = dict(voters)
        self.listener_name = listener_name
        self._dir = metadata_log_dir
        self._config = raft_config
        self._idle_interval_ms = idle_interval_ms
        self._log = logger
        self.cluster_id: str | None = None
        self._image = empty_image("", -1)
        self._listeners: list[ImageListener] = []
        self._driver: RaftDriver | None = None
        self._raft_log: KafkaRaftLog | None = None
        self._delta: MetadataDelta | None = None
        self._applied = 0  # the next offset to replay
        self._leader: int | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._replay_stopped = False
        self.controller: QuorumController | None = None
        self._snapshot_bytes = max_record_bytes_between_snapshots
        self._snapshotter: QuorumSnapshotter | None = None

    # -- what rpc.py needs ----------------------------------------------------------------

    def handle(self, request: m.RaftRequest) -> asyncio.Future[m.RaftResponse]:
        if self._driver is None:
            raise KafkaError(ErrorCode.broker_not_available, "the quorum is not running")
        return self._driver.handle(request)  # type: ignore[return-value]

    def voters(self) -> dict[int, tuple[str, int]]:
        return self._voters

    def leader_id(self) -> int | None:
        return self._leader

    @property
    def high_watermark(self) -> int:
        return -1 if self._driver is None else self._driver.node.high_watermark

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.cluster_id, _ = await loop.run_in_executor(
            None, ensure_meta_properties, [self._dir], self.node_id)
        self._image = empty_image(self.cluster_id, -1)
        self._delta = MetadataDelta(self._image)
        partition_dir = self._dir / METADATA_PARTITION_DIR
        raft_log = await loop.run_in_executor(None, KafkaRaftLog.open, partition_dir)
        self._raft_log = raft_log
        self._snapshotter = QuorumSnapshotter(raft_log, self._snapshot_bytes, self._log)
        election = await loop.run_in_executor(None, quorum_store.read, partition_dir)
        node = RaftNode(node_id=self.node_id, voters=VoterSet(frozenset(self._voters)),
                        log=raft_log, election=election, now_ms=_now_ms(),
                        config=self._config, cluster_id=self.cluster_id)
        self._driver = RaftDriver(
            node, raft_log, quorum_dir=partition_dir, voters=self._voters, logger=self._log,
            on_commit=self._on_commit, on_leader=self._on_leader,
            request_timeout_ms=self._config.request_timeout_ms,
            client_id=f"raft-client-{self.node_id}")
        driver = self._driver
        self.controller = QuorumController(
            node_id=self.node_id, cluster_id=self.cluster_id, append=driver.append,
            committed=self.committed_state, applied_offset=lambda: self._applied,
            leads=lambda epoch: isinstance(driver.node.quorum.state, Leader)
            and driver.node.quorum.epoch == epoch,
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=self._heartbeat_interval_ms, logger=self._log)
        self._driver.start()
        if self._idle_interval_ms > 0:
            self._idle_task = loop.create_task(self._write_noops(), name="raft-idle-noop")
        self._log.info("metadata quorum started", node_id=self.node_id,
                       voters=sorted(self._voters), cluster_id=self.cluster_id,
                       log_end_offset=raft_log.end_offset, epoch=election.epoch)

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        if self._driver is not None:
            await self._driver.stop()
            self._driver = None
        if self._snapshotter is not None:
            await self._snapshotter.stop()

    async def _write_noops(self) -> None:
        """Kafka's QuorumController writes a NoOpRecord every metadata.max.idle.interval.ms
        while it leads, so the high watermark (and the observers) keep moving."""
        while True:
            await asyncio.sleep(self._idle_interval_ms / 1000)
            driver = self._driver
            if driver is not None and self._leader == self.node_id and driver.fatal is None:
                with contextlib.suppress(Exception):  # lost the leadership meanwhile
                    await driver.append([_NOOP])

    # -- the committed log into the image ---------------------------------------------------

    def _on_leader(self, epoch: int, leader_id: int | None) -> None:
        self._leader = leader_id
        self._log.info("metadata quorum leader", node_id=self.node_id, epoch=epoch,
                       leader_id=-1 if leader_id is None else leader_id)
        self._publish(dataclasses.replace(
            self._image, controller_id=-1 if leader_id is None else leader_id))
        driver = self._driver
        if self.controller is not None and driver is not None:
            state = driver.node.quorum.state
            start = state.epoch_start_offset if isinstance(state, Leader) else -1
            self.controller.on_leader(epoch, leader_id, start)

    def _on_commit(self, high_watermark: int) -> None:
        """Replay the committed batches (all below the high watermark) into the image."""
        raft_log, delta = self._raft_log, self._delta
        if raft_log is None or delta is None:
            return
        self._replay_committed(raft_log, delta, high_watermark)
        if self.controller is not None:
            self.controller.on_commit(high_watermark)

    def _replay_committed(self, raft_log: KafkaRaftLog, delta: MetadataDelta,
                          high_watermark: int) -> None:
        replayed: list[Any] = []
        while self._applied < high_watermark and not self._replay_stopped:
            try:
                batches = decode_batches(raft_log.read(self._applied, _READ_BYTES),
                                         allow_partial_tail=False)
                batches = [b for b in batches if b.header.last_offset < high_watermark]
                for batch in batches:
                    for i, record in enumerate(batch.records):
                        if isinstance(record, ApiMessageAndVersion):
                            # The offset: a RegisterBrokerRecord's is what its broker
                            # must replay before it is unfenced.
                            delta.replay(record.message, batch.base_offset + i)
                    self._applied = batch.header.last_offset + 1
                    replayed.append(batch)
            except (RecordDecodeError, UnsupportedVersionError, MetadataLogError) as e:
                # Kafka's controller stops on such a fault; this node keeps its quorum
                # duties but its image (and its controller) stay where they were.
                self._log.error("a committed metadata batch cannot be replayed: the "
                                "metadata image stops here", offset=self._applied,
                                reason=str(e))
                self._replay_stopped = True
                return
            if not batches:
                break
        if replayed:
            image = delta.apply()
            self._delta = MetadataDelta(image, delta.next_producer_id,
                                        delta.scram_credentials, delta.acls,
                                        delta.client_quotas,
                                        broker_registrations=delta.broker_registrations,
                                        features=delta.features,
                                        broker_records=delta.broker_records)
            self._publish(image)
            if self._snapshotter is not None:
                self._snapshotter.on_replayed(replayed, lambda: MetadataState.of(delta, image))

    def committed_state(self) -> ControllerState:
        """What the committed records say: the controller's state on activation."""
        delta = self._delta
        registrations: dict[int, RegisteredBroker] = {} if delta is None \
            else dict(delta.broker_registrations)
        # The finalized levels: each delta carries every level replayed so far.
        features: dict[str, int] = {} if delta is None else dict(delta.features)
        return ControllerState(self._image, registrations, features,
                               0 if delta is None else delta.next_producer_id)

    def _publish(self, image: ClusterImage) -> None:
        old, self._image = self._image, image
        for listener in list(self._listeners):
            listener(old, image)

    @property
    def applied_offset(self) -> int:
        return self._applied

    # -- MetadataBackend -------------------------------------------------------------------

    @property
    def image(self) -> ClusterImage:
        return self._image

    def add_listener(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def scram_credentials(self) -> Mapping[tuple[str, int], Any]:
        return MappingProxyType({})

    def client_quotas(self) -> Mapping[Any, Any]:
        return MappingProxyType({})

    def acls(self) -> Mapping[uuid.UUID, Any]:
        return MappingProxyType({})

    def supported_features(self) -> Mapping[str, tuple[int, int]]:
        """Feature ranges this node supports, as ApiVersions answers them."""
        return SUPPORTED_FEATURES

    def __getattr__(self, name: str) -> Any:
        # Every change a broker asks of its metadata (create_topics, alter_partition,
        # ...): a controller-only node has no broker duties yet.
        if name.startswith("_"):
            raise AttributeError(name)

        async def not_controller(*args: Any, **kwargs: Any) -> NoReturn:
            raise KafkaError(ErrorCode.not_controller,
                             f"{name}: this controller does not serve broker requests yet")

        return not_controller


def _now_ms() -> int:
    return int(time.time() * 1000)
