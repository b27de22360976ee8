"""The broker's settings, with Kafka's names, defaults and checks."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.config.kraft import KRaftConfig
from kernel.config.schema import (
    INT_MAX,
    LONG_MAX,
    SECURITY_PROTOCOLS,
    ConfigSchema,
    at_least,
    between,
    host_counts,
    int_at_least,
    listener_list,
    log_dir_list,
    one_of,
    port,
    protocol_map,
    setting,
)
from kernel.config.topic_defs import TOPIC_CONFIGS, topic_configs

# ---------------------------------------------------------------------------
# the broker's settings
# ---------------------------------------------------------------------------


def _with_topic_synonyms(cls: type) -> type:
    """Add a settings field for each broker synonym of a topic config, with the name,
    default, check and doc of its one declaration (TOPIC_CONFIGS)."""
    annotations = cls.__annotations__  # its own: the class body has annotations
    for tc in TOPIC_CONFIGS:
        for synonym in tc.synonyms:
            annotations[synonym.attr] = tc.broker_type(synonym)
            setattr(cls, synonym.attr, setting(
                synonym.name, synonym.default, synonym.doc, check=synonym.check,
                dynamic=synonym.dynamic))
    return cls


@dataclass(frozen=True, slots=True)
@_with_topic_synonyms
class BrokerConfig(KRaftConfig):
    """Every broker setting; the KRaft ones (process.roles, node.id, controller.*,
    metadata.log.*) are inherited from kernel/config/kraft.py."""

    broker_id: int = setting(
        "broker.id", 1, "Synonym of node.id (Kafka keeps both): this node's id.",
        check=int_at_least(0),
    )
    broker_rack: str | None = setting(
        "broker.rack", None,
        "Rack of the broker, registered with it: replicas are placed over the racks "
        "(Kafka's rack-aware assignment); racks on some brokers only refuse automatic "
        "placement.")
    listeners: list[str] = setting(
        "listeners", ["PLAINTEXT://127.0.0.1:9092"],
        "Listeners as NAME://host:port; port 0 picks a free port.",
        check=listener_list,
    )
    advertised_listeners: list[str] | None = setting(
        "advertised.listeners", None,
        "Addresses given to clients in Metadata; defaults to listeners.",
        check=listener_list,
    )
    listener_security_protocol_map: list[str] = setting(
        "listener.security.protocol.map",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "Listener name to security protocol.", check=protocol_map,
    )
    inter_broker_listener_name: str | None = setting(
        "inter.broker.listener.name", None,
        "Listener the brokers use between themselves; must name one of listeners.",
    )
    security_inter_broker_protocol: str = setting(
        "security.inter.broker.protocol", "PLAINTEXT",
        "Names the inter-broker listener when inter.broker.listener.name is unset.",
        check=one_of(*SECURITY_PROTOCOLS),
    )
    # The client side of a SASL inter-broker listener: how a broker logs in to the others.
    sasl_mechanism_inter_broker_protocol: str = setting(
        "sasl.mechanism.inter.broker.protocol", "GSSAPI",
        "The SASL mechanism brokers log in to each other with on a SASL inter-broker "
        "listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is not "
        "supported). Its user name and password come from "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config, else sasl.jaas.config.",
    )
    sasl_jaas_config: str | None = setting(
        "sasl.jaas.config", None,
        "A JAAS login, as Kafka's: `org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="broker" password="...";` (ScramLoginModule for SCRAM): the '
        "user this broker logs in to the others as.", sensitive=True,
    )
    # TLS (ssl.*): every one may be set per listener as listener.name.<name>.ssl.*.
    ssl_keystore_type: str = setting(
        "ssl.keystore.type", "JKS", "Format of the keystore; PEM is the one read (KIP-651).",
    )
    ssl_keystore_location: str | None = setting(
        "ssl.keystore.location", None,
        "PEM file with the listener's private key and its certificate chain.",
    )
    ssl_keystore_password: str | None = setting(
        "ssl.keystore.password", None, "Not used with PEM (ssl.key.password decrypts the "
        "key).", sensitive=True,
    )
    ssl_keystore_certificate_chain: str | None = setting(
        "ssl.keystore.certificate.chain", None,
        "The certificate chain in PEM, inline (instead of ssl.keystore.location).",
        sensitive=True,
    )
    ssl_keystore_key: str | None = setting(
        "ssl.keystore.key", None, "The private key in PEM (PKCS#8), inline.", sensitive=True,
    )
    ssl_key_password: str | None = setting(
        "ssl.key.password", None, "Password of an encrypted private key.", sensitive=True,
    )
    ssl_truststore_type: str = setting(
        "ssl.truststore.type", "JKS",
        "Format of the truststore; PEM is the one read (KIP-651).",
    )
    ssl_truststore_location: str | None = setting(
        "ssl.truststore.location", None,
        "PEM file with the CA certificates client certificates are checked against.",
    )
    ssl_truststore_password: str | None = setting(
        "ssl.truststore.password", None, "Not used with PEM.", sensitive=True,
    )
    ssl_truststore_certificates: str | None = setting(
        "ssl.truststore.certificates", None, "Trusted certificates in PEM, inline.",
        sensitive=True,
    )
    ssl_client_auth: str = setting(
        "ssl.client.auth", "none", "Client certificates: none, requested or required.",
        check=one_of("none", "requested", "required"),
    )
    ssl_protocol: str = setting(
        "ssl.protocol", "TLSv1.3", "The TLS protocol (TLSv1.2 or TLSv1.3).",
        check=one_of("TLSv1.2", "TLSv1.3", "TLS"),
    )
    ssl_enabled_protocols: list[str] = setting(
        "ssl.enabled.protocols", ["TLSv1.2", "TLSv1.3"], "TLS versions a listener accepts.",
        check=lambda v: None if v and all(p in ("TLSv1.2", "TLSv1.3") for p in v)
        else "a non-empty list of TLSv1.2, TLSv1.3",
    )
    ssl_cipher_suites: list[str] = setting(
        "ssl.cipher.suites", [], "TLS 1.2 cipher suites (IANA or OpenSSL names); empty "
        "is OpenSSL's default set. TLS 1.3 suites are always on.",
    )
    ssl_principal_mapping_rules: str = setting(
        "ssl.principal.mapping.rules", "DEFAULT", "Rules mapping a client certificate's "
        "subject (RFC 2253) to a principal name: RULE:pattern/replacement/[LU], DEFAULT.",
    )
    ssl_endpoint_identification_algorithm: str | None = setting(
        "ssl.endpoint.identification.algorithm", "https",
        "Followers check the leader's host name against its certificate on an SSL "
        "inter-broker listener; empty turns the check off.",
    )
    log_dirs: list[str] = setting(
        "log.dirs", ["/tmp/kafka-logs"], "Directories holding partition logs and metadata.",
        check=log_dir_list,
    )
    num_partitions: int = setting(
        "num.partitions", 1, "Partitions of an auto-created topic.", check=int_at_least(1),
        dynamic=True,
    )
    default_replication_factor: int = setting(
        "default.replication.factor", 1, "Replication factor of auto-created topics.",
        check=between(1, 32767), dynamic=True,
    )
    # Replication: the follower's fetchers and the leader's ISR (Kafka's names and
    # defaults).
    replica_lag_time_max_ms: int = setting(
        "replica.lag.time.max.ms", 30000, "A follower that has not caught up with the "
        "leader's log end for this long leaves the ISR.", check=int_at_least(1),
    )
    replica_fetch_wait_max_ms: int = setting(
        "replica.fetch.wait.max.ms", 500, "How long a follower's fetch waits at the leader "
        "for data.", check=int_at_least(0),
    )
    replica_fetch_min_bytes: int = setting(
        "replica.fetch.min.bytes", 1, "Bytes a follower's fetch waits for at the leader.",
        check=int_at_least(1),
    )
    replica_fetch_max_bytes: int = setting(
        "replica.fetch.max.bytes", 1048576, "Bytes a follower fetches per partition (a "
        "larger first batch still comes whole).", check=int_at_least(0),
    )
    replica_fetch_response_max_bytes: int = setting(
        "replica.fetch.response.max.bytes", 10485760, "Bytes a follower's fetch response "
        "may carry.", check=int_at_least(0),
    )
    replica_fetch_backoff_ms: int = setting(
        "replica.fetch.backoff.ms", 1000, "Pause of a follower's fetching after an error.",
        check=int_at_least(0),
    )
    replica_high_watermark_checkpoint_interval_ms: int = setting(
        "replica.high.watermark.checkpoint.interval.ms", 5000, "How often the high "
        "watermarks are saved to disk (a restarted replica starts from them).",
        check=int_at_least(0),
    )
    replica_socket_timeout_ms: int = setting(
        "replica.socket.timeout.ms", 30000, "How long a follower waits for a fetch's answer "
        "before reconnecting.", check=int_at_least(1),
    )
    # The controller's preferred-leader rebalance (both metadata plugins).
    auto_leader_rebalance_enable: bool = setting(
        "auto.leader.rebalance.enable", True, "The controller moves leadership back to "
        "each partition's preferred replica (its first) every "
        "leader.imbalance.check.interval.seconds, where that replica is live and in the ISR.",
    )
    leader_imbalance_check_interval_seconds: int = setting(
        "leader.imbalance.check.interval.seconds", 300, "How often the controller checks "
        "the leaders' balance.", check=int_at_least(1),
    )
    leader_imbalance_per_broker_percentage: int = setting(
        "leader.imbalance.per.broker.percentage", 10, "Share of a broker's preferred "
        "partitions (in percent) that others may lead before metadata_zk's controller "
        "rebalances them (Kafka's KRaft controller, like metadata_kraft, rebalances any "
        "imbalance).", check=between(-INT_MAX - 1, INT_MAX),  # Kafka's INT, no validator
    )
    # Replication quotas (KIP-73, kernel/replica/replication_quota.py): the rates bound
    # the replicas each topic's {leader,follower}.replication.throttled.replicas names.
    leader_replication_throttled_rate: int = setting(
        "leader.replication.throttled.rate", LONG_MAX, "Bytes/s a leader sends to "
        "followers of the replicas its topics' leader.replication.throttled.replicas name "
        "(those not in the ISR are held back over it).", check=at_least(0), dynamic=True,
    )
    follower_replication_throttled_rate: int = setting(
        "follower.replication.throttled.rate", LONG_MAX, "Bytes/s a follower fetches for "
        "the replicas its topics' follower.replication.throttled.replicas name (those not "
        "caught up are left out of its fetches over it).", check=at_least(0), dynamic=True,
    )
    replica_alter_log_dirs_io_max_bytes_per_second: int = setting(
        "replica.alter.log.dirs.io.max.bytes.per.second", LONG_MAX, "Accepted for Kafka's "
        "tools; no effect: this broker never moves a replica between its log dirs.",
        check=at_least(0), dynamic=True,
    )
    replication_quota_window_num: int = setting(
        "replication.quota.window.num", 11, "Samples the replication quotas are measured "
        "over.", check=int_at_least(1),
    )
    replication_quota_window_size_seconds: int = setting(
        "replication.quota.window.size.seconds", 1, "Length of one replication quota "
        "sample.", check=int_at_least(1),
    )
    auto_create_topics_enable: bool = setting(
        "auto.create.topics.enable", True,
        "Create a topic that a Metadata request names (allow_auto_topic_creation); as in "
        "Kafka, Produce to an unknown topic answers unknown_topic_or_partition."
    )
    delete_topic_enable: bool = setting(
        "delete.topic.enable", True, "Allow DeleteTopics."
    )
    log_retention_check_interval_ms: int = setting(
        "log.retention.check.interval.ms", 300000, "How often retention runs.",
        check=at_least(1),
    )
    log_flush_offset_checkpoint_interval_ms: int = setting(
        "log.flush.offset.checkpoint.interval.ms", 60000,
        "How often the recovery point is checkpointed.", check=int_at_least(0),
    )
    log_cleaner_enable: bool = setting(
        "log.cleaner.enable", True, "Run the log cleaner (compacted topics).",
    )
    log_cleaner_threads: int = setting(
        "log.cleaner.threads", 1, "Cleaner threads.", check=int_at_least(0),
    )
    log_cleaner_dedupe_buffer_size: int = setting(
        "log.cleaner.dedupe.buffer.size", 134217728, "Memory of the cleaners' key -> "
        "offset maps, shared by the threads.", check=at_least(0),
    )
    log_cleaner_io_buffer_size: int = setting(
        "log.cleaner.io.buffer.size", 524288, "Read and write buffer of the cleaners, "
        "shared by the threads.", check=int_at_least(0),
    )
    log_cleaner_io_max_bytes_per_second: float = setting(
        "log.cleaner.io.max.bytes.per.second", sys.float_info.max, "Cleaner I/O "
        "(reads plus writes) per second.", check=at_least(0),
    )
    log_cleaner_backoff_ms: int = setting(
        "log.cleaner.backoff.ms", 15000, "Sleep of a cleaner with no log to clean.",
        check=at_least(0),
    )
    producer_id_expiration_ms: int = setting(
        "producer.id.expiration.ms", 86400000, "Time after its last write that a "
        "partition forgets an idempotent producer's sequence numbers.",
        check=int_at_least(1), dynamic=True,
    )
    transaction_partition_verification_enable: bool = setting(
        "transaction.partition.verification.enable", True,
        "Ask the transaction coordinator before a producer's first transactional write "
        "to a partition (or its TxnOffsetCommit) whether the partition is in its "
        "transaction (KIP-890), so a late write cannot open a hanging transaction.",
        dynamic=True,
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", 8388608, "Most record bytes in one consumer fetch response, "
        "besides the request's max_bytes (Kafka's default: 55 MB; see bench/README.md).",
        check=int_at_least(1024), dynamic=True,
    )
    # KIP-227 incremental fetch sessions (kernel/fetch_session.py).
    max_incremental_fetch_session_cache_slots: int = setting(
        "max.incremental.fetch.session.cache.slots", 1000, "Incremental fetch sessions "
        "kept; a full cache answers new ones with session id 0 (full fetches).",
        check=int_at_least(0),
    )
    min_incremental_fetch_session_eviction_ms: int = setting(
        "min.incremental.fetch.session.eviction.ms", 120000, "How long a fetch session "
        "goes unused before any newcomer may evict it.", check=int_at_least(0),
    )
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes", 104857600, "Largest request frame accepted.",
        check=int_at_least(1),
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms", 600000, "Idle connections are closed after this.",
        check=at_least(1),
    )
    connections_max_reauth_ms: int = setting(
        "connections.max.reauth.ms", 0,
        "KIP-368: a SASL session's longest life before the client must re-authenticate "
        "(the broker closes a connection whose session expired on its next request); 0 "
        "leaves only a credential's own expiry (an OAUTHBEARER token's exp).",
        check=int_at_least(0),
    )
    sasl_server_max_receive_size: int = setting(
        "sasl.server.max.receive.size", 524288,
        "Largest frame a SASL listener reads before the connection has authenticated; a "
        "larger size prefix closes the connection before its bytes are read. -1 is "
        "unbounded (socket.request.max.bytes still applies).",
        check=int_at_least(-INT_MAX - 1),
    )
    queued_max_request_bytes: int = setting(
        "queued.max.request.bytes", 268435456, "Request bytes held across all connections "
        "(arrived, not yet handled) before reads stop; -1 is unbounded, as Kafka's "
        "default; otherwise at least socket.request.max.bytes.",
        check=lambda v: None if v == -1 or v >= 1 else "-1 (unbounded) or a value >= 1",
    )
    max_connections: int = setting(
        "max.connections", INT_MAX, "Connections the broker holds; at the limit new ones "
        "wait to be accepted until one closes. listener.name.<listener>.max.connections "
        "sets one listener's.", check=at_least(0), dynamic=True,
    )
    max_connection_creation_rate: int = setting(
        "max.connection.creation.rate", INT_MAX, "New connections per second the broker "
        "accepts (KIP-612, measured over 11 one-second windows); above it the acceptor "
        "holds each new connection, up to a second, before serving it or accepting the next. "
        "listener.name.<listener>.max.connection.creation.rate sets one listener's.",
        check=int_at_least(0), dynamic=True,
    )
    max_connections_per_ip: int = setting(
        "max.connections.per.ip", INT_MAX, "Connections from one address; more are closed "
        "at once. 0 only with max.connections.per.ip.overrides.", check=at_least(0),
        dynamic=True,
    )
    max_connections_per_ip_overrides: list[str] = setting(
        "max.connections.per.ip.overrides", [], "Per-address or host name limits, "
        "host:count items (e.g. hostName:100,127.0.0.1:200).", check=host_counts,
        dynamic=True,
    )
    metrics_host: str = setting("metrics.host", "127.0.0.1", "Prometheus endpoint host.")
    metrics_port: int = setting(
        "metrics.port", -1, "Prometheus /metrics port; -1 disables, 0 picks a free port.",
        check=port(disabled=-1),
    )
    logging_format: str = setting(
        "logging.format", "console", "console for humans, json for machines.",
        check=one_of("console", "json"),
    )
    logging_level: str = setting(
        "logging.level", "info", "Log level.",
        check=one_of("debug", "info", "warning", "error"),
    )
    # listener.name.<name>.ssl.* and .sasl.enabled.mechanisms: listener name (upper
    # case) -> Kafka name -> value.
    listener_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The topic configs' broker synonyms (log.segment.bytes, log.retention.hours, ...)
    # are fields too, added by @_with_topic_synonyms from kernel/config/topic_defs.py.

    @property
    def log_retention_ms_resolved(self) -> int:
        return int(topic_configs()["retention.ms"].default_from(self))

    @property
    def log_roll_ms_resolved(self) -> int:
        return int(topic_configs()["segment.ms"].default_from(self))

    @property
    def log_flush_interval_ms_resolved(self) -> int:
        return int(topic_configs()["flush.ms"].default_from(self))


BROKER_SCHEMA = ConfigSchema("", BrokerConfig)
