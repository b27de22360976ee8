"""The txn plugin's ProducerIdManager over the KRaft backend's blocks: ids are handed out
in order, the next block is taken once the current one is used up, and concurrent
callers share one allocation rather than each taking a block."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernel.cluster import BrokerRegistration
from kernel.protocol.errors import ErrorCode, KafkaError
from plugins.metadata_kraft import KRaftMetadataBackend
from plugins.metadata_kraft.backend import PRODUCER_ID_BLOCK_SIZE
from plugins.txn.producer_ids import PREFETCH_THRESHOLD, ProducerIdManager


def test_ids_run_through_consecutive_blocks_without_gaps(tmp_path: Path) -> None:
    async def main() -> list[int]:
        backend = KRaftMetadataBackend(tmp_path, [tmp_path], 1,
                                       BrokerRegistration(1, "127.0.0.1", 9092))
        await backend.start()
        try:
            manager = ProducerIdManager(backend.allocate_producer_ids)
            return list(await asyncio.gather(*(manager.generate_producer_id()
                                               for _ in range(2 * PRODUCER_ID_BLOCK_SIZE + 1))))
        finally:
            await backend.stop()

    ids = asyncio.run(main())
    assert sorted(ids) == list(range(2 * PRODUCER_ID_BLOCK_SIZE + 1))


def test_the_next_block_is_fetched_once_ninety_percent_is_handed_out(tmp_path: Path) -> None:
    """As Kafka's RPCProducerIdManager: the caller that passes the threshold does not wait
    for the metadata log; the block is there when the current one runs out."""
    async def main() -> tuple[list[int], list[int], list[int]]:
        backend = KRaftMetadataBackend(tmp_path, [tmp_path], 1,
                                       BrokerRegistration(1, "127.0.0.1", 9092))
        await backend.start()
        allocations: list[int] = []

        async def allocate() -> range:
            block = await backend.allocate_producer_ids()
            allocations.append(block.start)
            return block

        try:
            manager = ProducerIdManager(allocate)
            threshold = int(PREFETCH_THRESHOLD * PRODUCER_ID_BLOCK_SIZE)
            ids = [await manager.generate_producer_id() for _ in range(threshold)]
            await asyncio.sleep(0)
            before = list(allocations)
            ids.append(await manager.generate_producer_id())  # crosses the threshold
            for _ in range(500):  # the metadata log's write, with no caller waiting on it
                if len(allocations) == 2:
                    break
                await asyncio.sleep(0.01)
            after = list(allocations)
            ids += [await manager.generate_producer_id()
                    for _ in range(PRODUCER_ID_BLOCK_SIZE - threshold)]
            await manager.close()
            return before, after, ids
        finally:
            await backend.stop()

    before, after, ids = asyncio.run(main())
    assert before == [0]
    assert after == [0, PRODUCER_ID_BLOCK_SIZE]
    assert ids == list(range(PRODUCER_ID_BLOCK_SIZE + 1))


def test_a_failed_prefetch_is_retried_by_the_caller_that_runs_out() -> None:
    async def main() -> tuple[list[int], int]:
        blocks = iter([range(0, 10), None, range(10, 20)])

        async def allocate() -> range:
            block = next(blocks)
            if block is None:
                raise KafkaError(ErrorCode.unknown_server_error, "metadata log unavailable")
            return block

        manager = ProducerIdManager(allocate)
        ids = [await manager.generate_producer_id() for _ in range(10)]  # prefetch fails
        for _ in range(5):
            await asyncio.sleep(0)
        return ids, await manager.generate_producer_id()

    ids, after = asyncio.run(main())
    assert ids == list(range(10))
    assert after == 10
