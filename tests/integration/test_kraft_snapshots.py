"""A real broker snapshots its committed metadata once
``metadata.log.max.record.bytes.between.snapshots`` of log were written, and a restart
replays the latest snapshot and the log after it: topics, configs, ACLs, SCRAM
credentials, client quotas and producer ids all come back. A ``.part`` left by a crash
mid-snapshot is removed at startup."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from kernel.api.cluster import AclBinding, ScramCredential
from kernel.cli import main as kafkernel
from kernel.testing import EmbeddedBroker
from plugins.metadata_kraft.snapshots import list_snapshots

TIMEOUT = 30.0
# A topic of 100 partitions is one batch of ~6 KB: over this, so it triggers a snapshot;
# the changes after it stay below it, so they are the log tail after the snapshot.
SNAPSHOT_BYTES = 4000


def _backend(broker: EmbeddedBroker) -> Any:
    assert broker.broker is not None
    return broker.broker.metadata


def _wait_for_snapshot(directory: Path, end_offset: int) -> None:
    """Until a snapshot holds every record below ``end_offset``."""
    deadline = time.monotonic() + TIMEOUT
    while not any(s.end_offset >= end_offset for s in list_snapshots(directory)):
        assert time.monotonic() < deadline, f"no snapshot to {end_offset} in {directory}"
        time.sleep(0.02)


def _committed(backend: Any) -> tuple[Any, ...]:
    """What a restart must give back (the broker's own registration is renewed)."""
    state = backend._state
    return (state.image.topics, state.image.broker_configs, state.features,
            state.next_producer_id, state.scram_credentials, state.acls, state.client_quotas)


def test_a_restart_replays_the_latest_snapshot_and_the_log_after_it(tmp_path: Path) -> None:
    broker = EmbeddedBroker(
        {"metadata.log.max.record.bytes.between.snapshots": SNAPSHOT_BYTES},
        data_dir=tmp_path).start()
    partition_dir = tmp_path / "__cluster_metadata-0"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("big", 100, 1, config={"retention.ms": "1234"})]
                            )["big"].result(TIMEOUT)
        backend = _backend(broker)
        _wait_for_snapshot(partition_dir, backend.metadata_log.next_offset)
        broker.call(backend.set_broker_configs(-1, {"log.retention.ms": "999"}))
        broker.call(backend.create_acls([AclBinding(2, "big", 3, "User:alice", "*", 3, 3)]))
        broker.call(backend.alter_scram_credentials(
            [ScramCredential("alice", 1, b"salt", b"stored", b"server", 4096)], []))
        broker.call(backend.alter_client_quotas(
            {(("user", "alice"),): {"producer_byte_rate": 2048.0}}))
        block = broker.call(backend.allocate_producer_ids())
        latest = list_snapshots(partition_dir)[-1]
        assert latest.end_offset < backend.metadata_log.next_offset  # a tail after it
        before = _committed(backend)
        assert before[0]["big"].configs["retention.ms"] == "1234"
    finally:
        broker.stop(remove_data=False)
    # a crash mid-snapshot leaves a .part: ignored, then removed
    torn = partition_dir / f"{latest.end_offset + 50:020d}-{latest.epoch:010d}.checkpoint.part"
    torn.write_bytes(b"half a snapshot")
    broker.start()
    try:
        backend = _backend(broker)
        assert backend._snapshotter.latest == latest  # loaded from the snapshot
        assert not torn.exists()
        assert _committed(backend) == before
        assert broker.call(backend.allocate_producer_ids()).start == block.stop
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=TIMEOUT).topics
        assert len(topics["big"].partitions) == 100
    finally:
        broker.stop()
    assert broker.logged_errors == []


def test_a_node_formatted_by_storage_format_starts_from_its_bootstrap_checkpoint(
        tmp_path: Path) -> None:
    """The first start replays bootstrap.checkpoint (features, --add-scram users) and
    keeps the cluster id `kafkernel storage format` wrote."""
    assert kafkernel(["storage", "format", "-t", "AAAAAAAAAAAAAAAAAAAAAQ",
                      "--override", f"log.dirs={tmp_path}", "--release-version", "4.0",
                      "--add-scram", "SCRAM-SHA-512=[name=bob,password=bob-secret]"]) == 0
    broker = EmbeddedBroker(data_dir=tmp_path).start()
    try:
        backend = _backend(broker)
        assert backend.cluster_id == "AAAAAAAAAAAAAAAAAAAAAQ"
        assert dict(backend._state.features) == {
            "metadata.version": 25, "group.version": 1, "transaction.version": 2}
        assert list(backend.scram_credentials()) == [("bob", 2)]
    finally:
        broker.stop()
