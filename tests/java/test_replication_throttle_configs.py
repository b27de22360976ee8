"""Kafka 4.3's kafka-configs sets the replication throttles as an operator (or
kafka-reassign-partitions) does: a topic's throttled-replicas lists, a broker's own
throttled rates and the cluster-wide default, each reaching the broker's quotas."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from kernel.config import LONG_MAX
from kernel.testing.embedded import EmbeddedBroker
from reference import tools
from tests.java.conftest import image
from tests.zk import wait_until

LEADER_REPLICAS = "leader.replication.throttled.replicas"


def ok(result: tools.ToolResult) -> str:
    assert result.returncode == 0, result.describe()
    return result.stdout


def test_kafka_configs_sets_and_removes_replication_throttles(broker: EmbeddedBroker) -> None:
    b = ("--bootstrap-server", broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("moved", 2, 1)])["moved"].result(30)
    topic = ("--entity-type", "topics", "--entity-name", "moved")
    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", *topic, "--add-config",
                 f"{LEADER_REPLICAS}=[0:1,1:2],follower.replication.throttled.replicas=*"))
    assert image(broker).topics["moved"].configs[LEADER_REPLICAS] == "0:1,1:2"
    assert broker.broker is not None
    quotas = broker.broker.replicas.replication_quotas
    wait_until(lambda: quotas.leader.is_throttled("moved", 0), "partition 0 throttled")
    assert not quotas.leader.is_throttled("moved", 1)  # its entry names broker 2
    assert quotas.follower.is_throttled("moved", 1)

    bad = tools.run(tools.CONFIG_COMMAND, *b, "--alter", *topic, "--add-config",
                    f"{LEADER_REPLICAS}=[*,0:1]")
    assert bad.returncode != 0
    assert (f"{LEADER_REPLICAS} must be the literal '*' or a list of replicas"
            in bad.stdout + bad.stderr), bad.describe()

    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                 "--entity-default", "--add-config", "follower.replication.throttled.rate=2000000"))
    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                 "--entity-name", "1", "--add-config", "leader.replication.throttled.rate=1000000"))
    wait_until(lambda: (quotas.leader.quota, quotas.follower.quota) == (1000000, 2000000),
               "the rates applied")
    out = ok(tools.run(tools.CONFIG_COMMAND, *b, "--describe", "--entity-type", "brokers",
                       "--entity-name", "1"))
    assert ("  leader.replication.throttled.rate=1000000 sensitive=false synonyms="
            "{DYNAMIC_BROKER_CONFIG:leader.replication.throttled.rate=1000000}") in out, out

    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                 "--entity-name", "1", "--delete-config", "leader.replication.throttled.rate"))
    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", "--entity-type", "brokers",
                 "--entity-default", "--delete-config", "follower.replication.throttled.rate"))
    ok(tools.run(tools.CONFIG_COMMAND, *b, "--alter", *topic, "--delete-config",
                 f"{LEADER_REPLICAS},follower.replication.throttled.replicas"))
    wait_until(lambda: (quotas.leader.quota, quotas.follower.quota) == (LONG_MAX, LONG_MAX)
               and not quotas.follower.is_throttled("moved", 1), "the throttles removed")
