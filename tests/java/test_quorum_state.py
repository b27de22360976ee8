"""quorum-state as Kafka 4.3.1's ``FileQuorumStateStore`` writes and reads it
(tests/java/QuorumStateCheck.java): ours is byte-identical to Kafka's, and Kafka reads
what we write."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from plugins.metadata_kraft.raft import quorum_store
from plugins.metadata_kraft.raft.quorum_store import ElectionRecord
from reference import tools
from reference.kafka import KafkaNotFetched

HERE = Path(__file__).resolve().parent
DIRECTORY = uuid.UUID(bytes=bytes.fromhex("27c68003c7cb42dd9baacd494fec4c81"))

# Kafka's file name -> the record and data_version Kafka wrote it with.
KAFKA_WRITES = {
    "kafka-v1-voted": (ElectionRecord(2, None, 1, DIRECTORY), 1),
    "kafka-v1-unknown": (ElectionRecord(1), 1),
    "kafka-v0-leader": (ElectionRecord(5, 3, 3), 0),
}


def test_quorum_state_matches_kafkas_file_store(tmp_path: Path) -> None:
    ours = {"ours-v1": (ElectionRecord(9, None, 2, DIRECTORY), 1),
            "ours-v0": (ElectionRecord(4, 1, None), 0)}
    for name, (record, version) in ours.items():
        (tmp_path / name).write_text(
            quorum_store.encode(record, version, frozenset({1, 2, 3})))
    try:
        classes = tools.compile_java([HERE / "QuorumStateCheck.java"], "quorum-state-check")
    except KafkaNotFetched as e:  # missing jars or JDK fail, never skip
        pytest.fail(str(e), pytrace=False)
    result = tools.run("QuorumStateCheck", str(tmp_path), *ours, extra_classpath=[classes])
    assert result.returncode == 0, result.stderr
    for name, (record, version) in KAFKA_WRITES.items():
        text = (tmp_path / name).read_text()
        assert quorum_store.encode(record, version, frozenset({1, 2, 3})) == text
        assert quorum_store.parse(text) == (record, version)
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("read")) == [
        "read ours-v0 epoch=4 leader=1 voted=-",
        "read ours-v1 epoch=9 leader=-1 voted=2:J8aAA8fLQt2bqs1JT-xMgQ",
    ]
