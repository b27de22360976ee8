"""DescribeLogDirs on a broker with two log dirs, over the wire: each dir with the
partitions it holds (new ones go to the dir with fewest), their sizes as the logs have
them, the volume's bytes as statvfs gives them, and KAFKA_STORAGE_ERROR for a dir whose
volume cannot be read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_log_dirs.v4.request import (
    DescribableLogDirTopic,
    DescribeLogDirsRequest,
)
from kio.schema.errors import ErrorCode

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import request


def _by_dir(answer: Any) -> dict[str, Any]:
    assert answer.error_code == ErrorCode.none
    return {r.log_dir: r for r in answer.results}


def test_each_log_dir_with_its_partitions(broker_factory: Callable[..., EmbeddedBroker],
                                          tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    b = broker_factory({"log.dirs": [str(first), str(second)]})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("spread", 4, 1)])["spread"].result(10)
    assert b.broker is not None
    logs = {p: b.broker.logs.get_log("spread", p) for p in range(4)}
    placed = {p: str(log.dir.parent) for p, log in logs.items() if log is not None}
    assert sorted(placed.values()) == sorted([str(first)] * 2 + [str(second)] * 2)

    results = _by_dir(request(b.bootstrap, DescribeLogDirsRequest(topics=None)))
    assert set(results) == {str(first), str(second)}
    for directory, result in results.items():
        assert result.error_code == ErrorCode.none
        # the coordinator plugin's __consumer_offsets is there too
        (topic,) = (t for t in result.topics if t.name == "spread")
        assert {p.partition_index for p in topic.partitions} == {
            p for p, d in placed.items() if d == directory}
        assert all(p.partition_size == 0 and p.offset_lag == 0 and not p.is_future_key
                   for p in topic.partitions)
        st = os.statvfs(directory)
        assert result.total_bytes == st.f_blocks * st.f_frsize
        assert 0 <= result.usable_bytes <= result.total_bytes

    asked = DescribeLogDirsRequest(topics=(DescribableLogDirTopic(topic="spread",
                                                                  partitions=(0,)),))
    results = _by_dir(request(b.bootstrap, asked))
    assert {r.log_dir: [t.name for t in r.topics] for r in results.values()} == {
        placed[0]: ["spread"], ({str(first), str(second)} - {placed[0]}).pop(): []}

    # A dir gone from under the broker: its volume cannot be read.
    away = tmp_path / "away"
    second.rename(away)
    try:
        results = _by_dir(request(b.bootstrap, DescribeLogDirsRequest(topics=None)))
    finally:
        away.rename(second)
    assert results[str(second)].error_code == ErrorCode.kafka_storage_error
    assert results[str(second)].topics == ()
    assert results[str(first)].error_code == ErrorCode.none
