"""Differential: our metadata record codec (plugins/metadata_kraft/records) reads what
Kafka 4.3.1 writes, byte for byte. A reference Kafka creates and deletes a topic, configs,
an ACL, SCRAM users, a client quota and a producer id block, then stops; every batch of
its ``__cluster_metadata-0`` segments and of ``bootstrap.checkpoint`` must decode, and
re-encoding each record, and rebuilding each batch, must give Kafka's bytes. A dynamic
quorum's format (``kafka-storage format --standalone``) adds Kafka's KRaftVersion and
Voters control records. One Kafka for the module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.errors import ErrorCode

from kernel.protocol.records import iter_batches, iter_records
from plugins.metadata_kraft.records import serde
from plugins.metadata_kraft.records.serde import ApiMessageAndVersion, MetadataBatch
from reference import kafka as reference_launcher
from reference.fetch import libs_dir
from tests.integration import wire

TOPIC = "kraft-records-diff"
# Left in place: the controlled shutdown writes its PartitionChangeRecord (leader -1).
KEPT_TOPIC = "kraft-records-kept"
TIMEOUT = 30.0


def _exercise(bootstrap: str) -> None:
    """Admin changes that each leave their records in the metadata log."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 3, 1, config={
            "cleanup.policy": "compact"}), NewTopic(KEPT_TOPIC, 1, 1)]).values():
        future.result(TIMEOUT)
    config = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[ConfigEntry(
        "retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([config]).values():
        future.result(TIMEOUT)
    acl = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice",
                     "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([acl]).values():
        future.result(TIMEOUT)
    scram = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", scram, b"alice-secret"),
            UserScramCredentialUpsertion("bob", scram, b"bob-secret")]).values():
        future.result(TIMEOUT)
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]).values():
        future.result(TIMEOUT)
    quota = AlterClientQuotasRequest(validate_only=False, entries=(EntryData(
        entity=(EntityData(entity_type="user", entity_name="alice"),
                EntityData(entity_type="client-id", entity_name=None)),
        ops=(OpData(key="producer_byte_rate", value=1024.0, remove=False),)),))
    answer = wire.request(bootstrap, quota)
    assert [e.error_code for e in answer.entries] == [ErrorCode.none]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(TOPIC, b"value")
    assert producer.flush(TIMEOUT) == 0
    for future in admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result(TIMEOUT)
    for future in admin.delete_topics([TOPIC]).values():
        future.result(TIMEOUT)


def _format_standalone(work: Path) -> Path:
    """``kafka-storage format --standalone`` of one controller: its metadata dir."""
    log_dir = work / "standalone"
    config = work / "standalone.properties"
    config.write_text("\n".join([
        "process.roles=controller", "node.id=1",
        "controller.quorum.bootstrap.servers=127.0.0.1:9093",
        "listeners=CONTROLLER://127.0.0.1:9093", "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT", f"log.dirs={log_dir}", ""]))
    done = subprocess.run(
        ["java", "-Xmx256m", "-cp", f"{libs_dir()}/*", reference_launcher.STORAGE_TOOL_MAIN,
         "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qk", "--config", str(config),
         "--standalone"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return log_dir


@pytest.fixture(scope="module")
def kafka_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """The metadata files of a reference Kafka that ran ``_exercise`` and stopped
    cleanly, and of a formatted dynamic quorum."""
    work = tmp_path_factory.mktemp("kafka-metadata")
    try:
        kafka = reference_launcher.start(work_dir=work / "kafka", overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"})
    except reference_launcher.KafkaNotFetched as e:
        pytest.fail(str(e), pytrace=False)
    try:
        _exercise(kafka.bootstrap)
    finally:
        kafka.stop()  # SIGTERM: a clean shutdown, its records in the log too
    standalone = _format_standalone(work)
    files = sorted((kafka.log_dir / "__cluster_metadata-0").glob("*.log"))
    files += [kafka.log_dir / "bootstrap.checkpoint",
              *sorted((standalone / "__cluster_metadata-0").glob("*.checkpoint"))]
    yield files


def _decode_file(path: Path) -> list[tuple[bytes, MetadataBatch]]:
    data = path.read_bytes()
    raw = [bytes(batch) for _, batch in iter_batches(data, allow_partial_tail=False)]
    decoded = serde.decode_batches(data, allow_partial_tail=False)
    assert len(decoded) == len(raw) > 0
    return list(zip(raw, decoded, strict=True))


def test_every_batch_kafka_wrote_decodes_and_encodes_back(kafka_files: list[Path]) -> None:
    record_types: set[str] = set()
    control_types: set[str] = set()
    for path in kafka_files:
        for raw, batch in _decode_file(path):
            for record, item in zip(iter_records(raw), batch.records, strict=True):
                if isinstance(item, ApiMessageAndVersion):
                    assert serde.encode_value(item) == record.value, (path.name, item)
                    record_types.add(type(item.message).__name__)
                else:
                    assert serde.encode_control(item) == (record.key, record.value)
                    control_types.add(type(item).__name__)
            build = serde.build_control_batch if batch.is_control else serde.build_metadata_batch
            again = build(batch.records, base_offset=batch.base_offset,  # type: ignore[arg-type]
                          epoch=batch.epoch, append_time_ms=batch.append_time_ms)
            assert again == raw, (path.name, batch.base_offset)
    assert record_types >= {
        "FeatureLevelRecord", "BeginTransactionRecord", "EndTransactionRecord", "NoOpRecord",
        "RegisterControllerRecord", "RegisterBrokerRecord", "BrokerRegistrationChangeRecord",
        "TopicRecord", "PartitionRecord", "ConfigRecord", "PartitionChangeRecord",
        "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
        "UserScramCredentialRecord", "RemoveUserScramCredentialRecord", "ClientQuotaRecord",
        "ProducerIdsRecord", "RemoveTopicRecord"}, sorted(record_types)
    assert control_types == {"LeaderChangeMessage", "SnapshotHeaderRecord",
                             "SnapshotFooterRecord", "KRaftVersionRecord", "VotersRecord"}
