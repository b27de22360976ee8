"""The txn plugin's ProducerIdManager over the KRaft backend's blocks: ids are handed out
in order, the next block is taken once the current one is used up, and concurrent
callers share one allocation rather than each taking a block."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernel.cluster import BrokerRegistration
from plugins.metadata_kraft import KRaftMetadataBackend
from plugins.metadata_kraft.backend import PRODUCER_ID_BLOCK_SIZE
from plugins.txn.producer_ids import ProducerIdManager


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
