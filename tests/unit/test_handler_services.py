"""Request handlers run on what ``kernel.services.BrokerServices`` names, without a
Broker: here a small services object holds a fixed cluster image and real components
(config, log manager, replica manager, metrics), and handlers are called directly."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from kernel.cluster import BrokerRegistration, ClusterImage, PartitionState, TopicImage
from kernel.config import BrokerConfig, LoadedConfig, load_config
from kernel.fetch_session import FetchSessionCache
from kernel.handlers import describe_configs, list_offsets
from kernel.handlers.config_entries import ConfigResourceType, ConfigSource
from kernel.log.manager import LogManager
from kernel.logging import Notices, make_logger
from kernel.metrics import BrokerMetrics
from kernel.protocol.build import request_module
from kernel.protocol.errors import ErrorCode
from kernel.purgatory import Purgatory
from kernel.replica.manager import ReplicaManager
from kernel.requests import RequestContext, Session
from kernel.services import BrokerServices, PluginServices, RequestServices, ServedApi

BROKER_ID = 1
TOPIC = "orders"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class StaticMetadata:
    """A metadata backend's read side: one image that does not change."""

    image: ClusterImage


class Observers:
    def log_appended(self, topic: str, partition: int, base_offset: int,
                     last_offset: int) -> None:
        pass

    def high_watermark_changed(self, topic: str, partition: int,
                               high_watermark: int) -> None:
        pass


@dataclass
class Services:
    """Exactly the members of BrokerServices, no more."""

    config: BrokerConfig
    loaded: LoadedConfig
    metadata: StaticMetadata
    replicas: ReplicaManager
    logs: LogManager
    produce_purgatory: Purgatory[Any]
    fetch_purgatory: Purgatory[Any]
    delete_records_purgatory: Purgatory[Any]
    fetch_sessions: FetchSessionCache
    metrics: BrokerMetrics
    log: Any
    refused_input_notices: Notices = field(default_factory=Notices)
    routes: list[ServedApi] = field(default_factory=list)


def image() -> ClusterImage:
    topic = TopicImage(TOPIC, uuid.uuid4(), {
        0: PartitionState(0, (BROKER_ID,), (BROKER_ID,), leader=BROKER_ID),
        # Led by another broker: this one follows.
        1: PartitionState(1, (2, BROKER_ID), (2, BROKER_ID), leader=2),
    }, configs={"retention.ms": "3600000"})
    return ClusterImage(
        cluster_id="test-cluster", controller_id=BROKER_ID,
        brokers={b: BrokerRegistration(b, "localhost", 9000 + b) for b in (BROKER_ID, 2)},
        topics={TOPIC: topic}, topics_by_id={topic.topic_id: topic},
    )


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    loaded = load_config(None, extra={"broker.id": BROKER_ID, "log.dirs": str(tmp_path),
                                      "num.partitions": 3})
    config = loaded.broker
    log = make_logger("console", "warning")
    logs = LogManager([tmp_path], config, logger=log)
    logs.load()
    purgatories = [Purgatory[Any](name) for name in ("Produce", "Fetch", "DeleteRecords")]
    replicas = ReplicaManager(BROKER_ID, logs, *purgatories, Observers(), log)
    metadata = StaticMetadata(image())
    replicas.apply_image(None, metadata.image)
    metrics = BrokerMetrics(BROKER_ID)
    sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                 config.min_incremental_fetch_session_eviction_ms)
    yield Services(config, loaded, metadata, replicas, logs, *purgatories, sessions, metrics,
                   log)
    metrics.close()
    logs.close()


def context(services: BrokerServices, api_key: int, api_version: int,
            allowed: bool = True) -> RequestContext:
    def authorize(session: Session, operation: str, resource_type: str, name: str) -> bool:
        return allowed

    return RequestContext(services=services, authorize=authorize,
                          session=Session(peer="127.0.0.1:50000", listener_name="PLAINTEXT"),
                          api_key=api_key, api_version=api_version, correlation_id=1,
                          client_id="test")


def list_offsets_request(version: int, timestamp: int, partitions: tuple[int, ...]) -> Any:
    m = request_module(list_offsets.API_KEY, version)
    return m.ListOffsetsRequest(
        replica_id=-1, isolation_level=0,
        topics=(m.ListOffsetsTopic(name=TOPIC, partitions=tuple(
            m.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
            for p in partitions)),),
    )


def partitions_of(response: Any) -> dict[int, Any]:
    (topic,) = response.topics
    assert topic.name == TOPIC
    return {p.partition_index: p for p in topic.partitions}


def test_list_offsets_answers_from_the_replica_manager(services: Services) -> None:
    ctx = context(services, list_offsets.API_KEY, 7)
    request = list_offsets_request(7, list_offsets.LATEST, (0, 1, 9))
    answered = partitions_of(list_offsets.handle(ctx, request))
    assert answered[0].error_code == ErrorCode.none
    assert (answered[0].offset, answered[0].leader_epoch) == (0, 0)
    # Partition 1 is led by broker 2; partition 9 does not exist.
    assert answered[1].error_code == ErrorCode.not_leader_or_follower
    assert answered[9].error_code == ErrorCode.unknown_topic_or_partition


def test_list_offsets_asks_the_contexts_authorizer(services: Services) -> None:
    ctx = context(services, list_offsets.API_KEY, 7, allowed=False)
    answered = partitions_of(list_offsets.handle(
        ctx, list_offsets_request(7, list_offsets.EARLIEST, (0,))))
    assert answered[0].error_code == ErrorCode.topic_authorization_failed


def describe_configs_request(resource_type: int, name: str) -> Any:
    m = request_module(describe_configs.API_KEY, 4)
    return m.DescribeConfigsRequest(resources=(m.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=None),))


def test_describe_configs_of_a_topic_and_of_the_broker(services: Services) -> None:
    ctx = context(services, describe_configs.API_KEY, 4)
    (topic,) = describe_configs.handle(
        ctx, describe_configs_request(ConfigResourceType.TOPIC, TOPIC)).results
    assert topic.error_code == ErrorCode.none
    configs = {c.name: c for c in topic.configs}
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG

    (broker,) = describe_configs.handle(
        ctx, describe_configs_request(ConfigResourceType.BROKER, str(BROKER_ID))).results
    assert broker.error_code == ErrorCode.none
    configs = {c.name: c for c in broker.configs}
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG


def test_describe_configs_denied_without_a_broker(services: Services) -> None:
    ctx = context(services, describe_configs.API_KEY, 4, allowed=False)
    (topic,) = describe_configs.handle(
        ctx, describe_configs_request(ConfigResourceType.TOPIC, TOPIC)).results
    assert topic.error_code == ErrorCode.topic_authorization_failed


def _members(protocol: type) -> set[str]:
    return {name for cls in protocol.__mro__ if Protocol in cls.__bases__
            for name in vars(cls) if not name.startswith("_")}


def _reads(files: list[Path], owners: set[str]) -> dict[str, set[str]]:
    """Each ``<owner>.<name>`` and ``<x>.<owner>.<name>`` read in ``files``: name -> files."""
    used: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in owners) or (
                    isinstance(owner, ast.Attribute) and owner.attr in owners):
                used.setdefault(node.attr, set()).add(str(path.relative_to(ROOT)))
    return used


def test_handlers_use_only_what_broker_services_names() -> None:
    """Read statically, as no handler test reaches every line: each ``<x>.services.<name>``
    and ``services.<name>`` in a kernel request handler is a member of BrokerServices, in
    a plugin's handler a member of the narrower RequestServices (no replica or log
    manager)."""
    kernel, shared = _members(BrokerServices), _members(RequestServices)
    assert {"metadata", "replicas"} <= kernel and "metadata" in shared
    assert "replicas" not in shared
    files = [*ROOT.glob("kernel/handlers/*.py"), ROOT / "kernel/authorized_operations.py"]
    used = _reads(files, {"services"})
    assert used, "no handler reads its services"
    assert {name: sorted(where) for name, where in used.items() if name not in kernel} == {}
    used = _reads(list(ROOT.glob("plugins/*/handlers/*.py")), {"services"})
    assert used, "no plugin handler reads its services"
    assert {name: sorted(where) for name, where in used.items() if name not in shared} == {}


def test_plugins_use_only_what_plugin_services_names() -> None:
    """Each ``broker.<name>`` (the lifecycle hooks' argument, kept as ``self.broker`` or
    ``self._broker``) in a plugin is a member of PluginServices: the replica and log
    managers are not among them."""
    members = _members(PluginServices)
    assert {"partition_writer", "partition", "timer"} <= members
    assert not {"replicas", "logs"} & members
    used = _reads(list(ROOT.glob("plugins/**/*.py")), {"broker", "_broker"})
    assert {"timer", "partition_writer", "partition"} <= set(used)
    assert {name: sorted(where) for name, where in used.items() if name not in members} == {}
