"""KRaft snapshots of the metadata_kraft plugin: names, writer and reader, leftovers of a
crash, the image written as records and replayed back, cleaning of old snapshots and
the log below them, and ``kafkernel storage format``'s files."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import structlog
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord

from kernel.api.log import PluginLogConfig
from kernel.cli import main
from plugins.metadata_kraft.image import ConfigResourceType
from plugins.metadata_kraft.image_records import MetadataState, image_records, replay
from plugins.metadata_kraft.log import MetadataLog, versioned
from plugins.metadata_kraft.properties import parse_uuid, read_meta_properties
from plugins.metadata_kraft.records.schema import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ConfigRecord,
    EntityData,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from plugins.metadata_kraft.records.serde import decode_batches
from plugins.metadata_kraft.snapshots import (
    SnapshotId,
    delete_snapshot,
    latest_snapshot,
    list_snapshots,
    parse_name,
    read_snapshot,
    remove_leftovers,
    write_snapshot,
)
from plugins.metadata_kraft.snapshotter import SnapshotPolicy, Snapshotter
from plugins.metadata_kraft.storage import read_bootstrap_records

DIR = uuid.UUID(int=7)
VOTERS = VotersRecord(version=0, voters=(Voter(
    voter_id=1, voter_directory_id=DIR, endpoints=(Endpoint(name="CONTROLLER",
                                                             host="h", port=9093),),
    k_raft_version_feature=KRaftVersionFeature(min_supported_version=0,
                                               max_supported_version=1)),))


def test_names_are_kafkas() -> None:
    sid = SnapshotId(12345, 7)
    assert sid.filename == "00000000000000012345-0000000007.checkpoint"
    assert parse_name(sid.filename) == (sid, ".checkpoint")
    part = "00000000000000012345-0000000007.checkpoint.part"
    assert parse_name(part) == (sid, ".checkpoint.part")
    assert parse_name("00000000000000012345-0000000007.checkpoint.deleted")[1] == \
        ".checkpoint.deleted"  # type: ignore[index]
    assert parse_name("00000000000000000000.log") is None
    assert parse_name("bootstrap.checkpoint") is None


def _records(n: int) -> list[FeatureLevelRecord]:
    return [FeatureLevelRecord(name=f"f{i}", feature_level=i % 100) for i in range(n)]


@pytest.mark.parametrize("voters", [None, VOTERS])
def test_snapshot_round_trip_and_layout(tmp_path: Path, voters: VotersRecord | None) -> None:
    records = [versioned(r) for r in _records(50)]
    sid = SnapshotId(100, 3)
    path = write_snapshot(tmp_path, sid, records, last_contained_log_timestamp=42,
                          voters=voters, kraft_version=1 if voters else 0,
                          append_time_ms=5, max_batch_bytes=300)
    assert path.name == sid.filename and not list(tmp_path.glob("*.part"))
    snapshot = read_snapshot(path)
    assert snapshot.id == sid and snapshot.last_contained_log_timestamp == 42
    assert snapshot.records == tuple(records)
    assert snapshot.voters == voters and snapshot.kraft_version == (1 if voters else 0)
    batches = decode_batches(path.read_bytes(), allow_partial_tail=False)
    # RecordsSnapshotWriter: header (+ KRaftVersion, Voters) in one control batch at 0,
    # records in batches of at most max_batch_bytes, the footer alone last; offsets run
    # on from 0, every batch stamped with the snapshot's epoch.
    header = [SnapshotHeaderRecord(version=0, last_contained_log_timestamp=42)]
    if voters:
        header += [KRaftVersionRecord(version=0, k_raft_version=1), voters]
    assert list(batches[0].records) == header and batches[0].is_control
    assert batches[-1].records == (SnapshotFooterRecord(version=0),)
    assert len(batches) > 3
    offset = 0
    for batch in batches:
        assert batch.base_offset == offset and batch.epoch == 3
        offset += len(batch.records)


def test_a_torn_or_headless_snapshot_is_refused(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, SnapshotId(1, 1), [versioned(r) for r in _records(3)],
                          last_contained_log_timestamp=0)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(Exception, match="cannot be read|SnapshotFooterRecord"):
        read_snapshot(path)


def test_part_files_are_ignored_and_removed_and_deletion_renames_first(tmp_path: Path) -> None:
    for sid in (SnapshotId(10, 1), SnapshotId(20, 2)):
        write_snapshot(tmp_path, sid, [], last_contained_log_timestamp=0)
    (tmp_path / "00000000000000000030-0000000002.checkpoint.part").write_bytes(b"half")
    (tmp_path / "00000000000000000005-0000000001.checkpoint.deleted").write_bytes(b"x")
    assert list_snapshots(tmp_path) == [SnapshotId(10, 1), SnapshotId(20, 2)]
    assert latest_snapshot(tmp_path) == SnapshotId(20, 2)
    removed = remove_leftovers(tmp_path)
    assert sorted(p.name for p in removed) == [
        "00000000000000000005-0000000001.checkpoint.deleted",
        "00000000000000000030-0000000002.checkpoint.part"]
    delete_snapshot(tmp_path, SnapshotId(10, 1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [SnapshotId(20, 2).filename]


def _full_state() -> MetadataState:
    t1, t2 = uuid.UUID(int=11), uuid.UUID(int=12)
    records = [
        FeatureLevelRecord(name="metadata.version", feature_level=30),
        FeatureLevelRecord(name="group.version", feature_level=1),
        RegisterBrokerRecord(broker_id=1, incarnation_id=uuid.UUID(int=3), broker_epoch=4,
                             end_points=(BrokerEndpoint(name="PLAINTEXT", host="h", port=1,
                                                        security_protocol=0),),
                             rack="r", fenced=False, log_dirs=(DIR,), cordoned_log_dirs=()),
        TopicRecord(name="a", topic_id=t1), TopicRecord(name="b", topic_id=t2),
        *(PartitionRecord(topic_id=t1, partition_id=p, replicas=(1,), isr=(1,), leader=1,
                          leader_epoch=0, partition_epoch=0, directories=(DIR,))
          for p in range(3)),
        PartitionRecord(topic_id=t2, partition_id=0, replicas=(1,), isr=(1,), leader=1,
                        leader_epoch=0, partition_epoch=0, directories=(DIR,)),
        PartitionChangeRecord(topic_id=t1, partition_id=1, isr=(1,), leader=1),
        ConfigRecord(resource_type=ConfigResourceType.TOPIC, resource_name="a",
                     name="retention.ms", value="5"),
        ConfigRecord(resource_type=ConfigResourceType.BROKER, resource_name="",
                     name="log.retention.ms", value="6"),
        ConfigRecord(resource_type=ConfigResourceType.BROKER, resource_name="1",
                     name="log.cleaner.threads", value="2"),
        ClientQuotaRecord(entity=(EntityData(entity_type="user", entity_name="u"),),
                          key="producer_byte_rate", value=1024.0, remove=False),
        ProducerIdsRecord(broker_id=1, broker_epoch=4, next_producer_id=2000),
        AccessControlEntryRecord(id=uuid.UUID(int=99), resource_type=2, resource_name="a",
                                 pattern_type=3, principal="User:u", host="*", operation=3,
                                 permission_type=3),
        UserScramCredentialRecord(name="u", mechanism=1, salt=b"s", stored_key=b"k",
                                  server_key=b"v", iterations=4096),
    ]
    return replay(MetadataState.empty("c", 1), records)


def test_image_to_records_to_an_equal_image() -> None:
    state = _full_state()
    records = image_records(state, lambda _broker: DIR)
    assert records[0] == FeatureLevelRecord(name="metadata.version", feature_level=30)
    assert replay(MetadataState.empty("c", 1), records) == state
    assert state.image.topics["a"].partitions[1].partition_epoch == 1
    assert state.next_producer_id == 2000 and state.acls and state.client_quotas


def test_snapshots_clean_old_ones_and_the_log_below_them(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path, 1, structlog.get_logger(),
                      PluginLogConfig(segment_bytes=2048))
    log.open()
    log.begin_epoch()
    snapshotter = Snapshotter(log, SnapshotPolicy(max_record_bytes_between_snapshots=2000,
                                                  max_retention_bytes=0), structlog.get_logger())
    state = MetadataState.empty("c", 1)
    for round_ in range(2):
        for i in range(40):
            record = FeatureLevelRecord(name=f"f{round_}", feature_level=i)
            log.append_blocking([versioned(record)])
            state = replay(state, [record])
        assert snapshotter.due()
        snapshotter.write(snapshotter.capture(state), lambda _b: DIR)
        assert not snapshotter.due()
    _first, second = list_snapshots(log.directory)
    assert snapshotter.clean() == second.end_offset
    assert list_snapshots(log.directory) == [second]
    segments = sorted(log.directory.glob("*.log"))
    assert int(segments[0].stem) <= second.end_offset
    assert int(segments[0].stem) > 0  # segments wholly below it are gone
    log.close()
    # restart: the latest snapshot, then only the log after it
    again = MetadataLog(tmp_path, 1, structlog.get_logger(), PluginLogConfig(segment_bytes=2048))
    (log.directory / "00000000000000099999-0000000001.checkpoint.part").write_bytes(b"torn")
    loaded, sid = Snapshotter(again, SnapshotPolicy(), structlog.get_logger()).load(
        MetadataState.empty("c", 1))
    assert sid == second and loaded == state
    assert again.open(second.end_offset) == []
    assert not list(log.directory.glob("*.part"))
    again.close()


def test_storage_format_writes_kafkas_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    data, meta = tmp_path / "data", tmp_path / "meta"
    overrides = ["--override", f"log.dirs={data}", "--override", f"metadata.log.dir={meta}",
                 "--override", "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                 "--override", "controller.listener.names=CONTROLLER",
                 "--override", "process.roles=broker,controller", "--override", "node.id=1",
                 "--override", "controller.quorum.bootstrap.servers=127.0.0.1:9093"]
    cluster_id = "AAAAAAAAAAAAAAAAAAAAAQ"
    args = ["storage", "format", "-t", cluster_id, *overrides]
    assert main(args) == 1
    assert "you must specify one of the following: --standalone" in capsys.readouterr().err
    assert main([*args, "--standalone", "--add-scram",
                 "SCRAM-SHA-256=[name=alice,password=alice-secret]"]) == 0
    out = capsys.readouterr().out
    assert f"Formatting dynamic metadata voter directory {meta}" in out
    for d in (data, meta):
        props = read_meta_properties(d)
        assert props is not None and sorted(props) == [
            "cluster.id", "directory.id", "node.id", "version"]
        assert props["cluster.id"] == cluster_id and props["version"] == "1"
        records = read_bootstrap_records(d)
        assert records is not None
        assert [r.name for r in records if isinstance(r, FeatureLevelRecord)] == [
            "metadata.version", "eligible.leader.replicas.version", "group.version",
            "share.version", "streams.version", "transaction.version"]
        assert [r.name for r in records if isinstance(r, UserScramCredentialRecord)] == ["alice"]
    bootstrap = read_snapshot(meta / "__cluster_metadata-0" / SnapshotId(0, 0).filename)
    assert bootstrap.kraft_version == 1 and bootstrap.voters is not None
    (voter,) = bootstrap.voters.voters
    meta_props = read_meta_properties(meta)
    assert meta_props is not None
    assert voter.voter_directory_id == parse_uuid(meta_props["directory.id"])
    assert (voter.endpoints[0].name, voter.endpoints[0].port) == ("CONTROLLER", 9093)
    assert not (data / "__cluster_metadata-0").exists()
    assert main([*args, "--standalone"]) == 1
    assert "is already formatted. Use --ignore-formatted" in capsys.readouterr().err
    assert main([*args, "--standalone", "--ignore-formatted"]) == 0
    assert "All of the log directories are already formatted." in capsys.readouterr().out


def test_a_snapshot_is_due_by_bytes_or_by_interval_once_something_is_new(tmp_path: Path
                                                                         ) -> None:
    log = MetadataLog(tmp_path, 1, structlog.get_logger())
    log.open()
    log.begin_epoch()
    state = MetadataState.empty("c", 1)
    by_time = Snapshotter(log, SnapshotPolicy(max_snapshot_interval_ms=1),
                          structlog.get_logger())
    never = Snapshotter(log, SnapshotPolicy(max_snapshot_interval_ms=0),
                        structlog.get_logger())
    time.sleep(0.005)
    assert by_time.due() and not never.due()  # the LeaderChange batch is new
    pending = by_time.capture(state)
    assert pending.id == SnapshotId(log.next_offset, log.epoch)
    assert not by_time.due()  # nothing new since
    time.sleep(0.005)
    assert not by_time.due()
    log.append_blocking([versioned(FeatureLevelRecord(name="metadata.version",
                                                      feature_level=30))])
    assert by_time.due() and not never.due()
    log.close()
