"""The group coordinator of one broker (Kafka's ``GroupCoordinatorService``): the kernel's
coordinator runtime over ``__consumer_offsets`` with one
:class:`~plugins.coordinator.shard.GroupCoordinatorShard` per partition, plus
what the handlers share: which partition owns a group (FindCoordinator asks it too),
how runtime failures read as Kafka error codes, and the request context of a shard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from kernel.api.coordination import (
    CoordinatorError,
    CoordinatorRuntime,
    TransactionResult,
    create_internal_topic,
)
from kernel.api.errors import KafkaError
from plugins.coordinator.context import RequestContext
from plugins.coordinator.metrics import GroupMetrics
from plugins.coordinator.records import partition_for
from plugins.coordinator.result import CoordinatorResult, append_error_to_response_error
from plugins.coordinator.settings import CoordinatorSettings
from plugins.coordinator.shard import GroupCoordinatorShard

if TYPE_CHECKING:
    from kernel.api.handlers import RequestContext as KernelRequestContext
    from kernel.api.services import PluginServices

__all__ = ["OFFSETS_TOPIC", "GroupCoordinatorService"]

OFFSETS_TOPIC = "__consumer_offsets"

T = TypeVar("T")


class GroupCoordinatorService:
    def __init__(self, broker: PluginServices, settings: CoordinatorSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.config = settings
        self.log: Any = broker.log.bind(component="group-coordinator")
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            broker.partition_writer(), broker.timer, OFFSETS_TOPIC,
            lambda _partition: GroupCoordinatorShard(self.config), logger=broker.log,
            commit_timeout_ms=settings.offsets_commit_timeout_ms,
        )
        self.metrics = GroupMetrics(self.runtime, broker)
        self._creating: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._create_offsets_topic()
        self.runtime.start()

    async def stop(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
        await self.runtime.stop()
        self.metrics.close()

    def recreate_offsets_topic(self) -> None:
        """The topic was deleted (Kafka lets an admin do that): as Kafka does on a
        FindCoordinator for a group, create it again; until it has leaders, groups are
        answered COORDINATOR_NOT_AVAILABLE and clients retry."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(
                self._create_offsets_topic())

    async def _create_offsets_topic(self) -> None:
        """Kafka creates the topic on the first FindCoordinator; creating it at startup
        means the first group does not pay for it. A cluster should start its brokers
        before the first enables this plugin (the replication factor is capped at the
        brokers registered then), or create the topic itself."""
        settings = self.settings
        await create_internal_topic(
            self.broker.metadata, self.log, OFFSETS_TOPIC,
            settings.offsets_topic_num_partitions, settings.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "compression.type": "producer",
             "segment.bytes": str(settings.offsets_topic_segment_bytes)})

    # -- routing -----------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that owns ``group_id``; the topic's
        actual partition count wins over the setting, as in Kafka."""
        topic = self.broker.metadata.image.topic(OFFSETS_TOPIC)
        if topic is None or not topic.partitions:
            raise CoordinatorError(ErrorCode.coordinator_not_available,
                                   f"{OFFSETS_TOPIC} does not exist yet")
        return partition_for(group_id, len(topic.partitions))

    def coordinator_partition(self, group_id: str) -> tuple[str, int]:
        """FindCoordinator's question: the partition that owns ``group_id``. A deleted
        offsets topic is created again, as Kafka does on a FindCoordinator for a group;
        meanwhile the answer is COORDINATOR_NOT_AVAILABLE."""
        if OFFSETS_TOPIC not in self.broker.metadata.image.topics:
            self.recreate_offsets_topic()
        return OFFSETS_TOPIC, self.partition_of(group_id)

    # -- operations --------------------------------------------------------------------

    def write(
        self, group_id: str,
        op: Callable[[GroupCoordinatorShard, Hashable], CoordinatorResult[T]],
    ) -> asyncio.Future[T]:
        """Run ``op`` on the shard owning ``group_id``; its response once committed."""
        return self.runtime.write(self.partition_of(group_id), op)

    async def member_write(
        self, ctx: KernelRequestContext, group_id: str,
        op: Callable[[GroupCoordinatorShard, RequestContext, Hashable], CoordinatorResult[T]],
        error_response: Callable[[ErrorCode], T],
        *,
        while_loading: ErrorCode = ErrorCode.coordinator_load_in_progress,
    ) -> T:
        """A member's request (join, sync, heartbeat, leave): READ on the group, then
        ``op`` on its shard; a denial or a runtime failure is answered with
        ``error_response`` of the code a client expects, ``while_loading`` when the
        group's partition is still being loaded."""
        if not self.authorize(ctx, "READ", "GROUP", group_id):
            return error_response(ErrorCode.group_authorization_failed)
        shard_ctx = self.shard_context(ctx)
        try:
            return await self.write(
                group_id, lambda shard, reply_to: op(shard, shard_ctx, reply_to)
            )
        except KafkaError as e:
            error = self.error_code(e)
            if error == ErrorCode.coordinator_load_in_progress:
                error = while_loading
            return error_response(error)

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, result: TransactionResult,
                             timeout_ms: int) -> asyncio.Future[None]:
        """WriteTxnMarkers for a partition of ``__consumer_offsets`` (Kafka's
        ``completeTransaction``): the runtime writes the marker and the shard commits
        or drops the producer's pending offsets; resolves once committed."""
        return self.runtime.complete_transaction(partition, producer_id, producer_epoch,
                                                 coordinator_epoch, result, timeout_ms)

    def read(self, group_id: str, fn: Callable[[GroupCoordinatorShard], T]) -> asyncio.Future[T]:
        return self.runtime.read(self.partition_of(group_id), fn)

    def led_partitions(self) -> dict[int, str]:
        return self.runtime.partition_states()

    # -- shared by the handlers --------------------------------------------------------

    @staticmethod
    def shard_context(ctx: KernelRequestContext) -> RequestContext:
        host = ctx.session.peer.rsplit(":", 1)[0].strip("[]")
        # Kafka shows client hosts as Java's InetAddress.toString(): "/127.0.0.1".
        return RequestContext(client_id=ctx.client_id or "", client_host=f"/{host}",
                              api_version=ctx.api_version)

    @staticmethod
    def error_code(error: KafkaError, *, offset_commit: bool = False) -> ErrorCode:
        """What a client sees when an operation failed in the runtime."""
        return append_error_to_response_error(error.error_code, offset_commit=offset_commit)

    @staticmethod
    def authorize(ctx: KernelRequestContext, operation: str, resource_type: str,
                  name: str) -> bool:
        return ctx.authorize(ctx.session, operation, resource_type, name)
