"""The acl plugin with real clients over SASL_PLAINTEXT (auth_sasl PLAIN users): ACLs
created, listed and deleted with confluent-kafka's and kafka-python's admin clients; a
user allowed to write one topic and read it with one group can do exactly that; prefixed
ACLs; DENY beats ALLOW; a super user may do everything; ACLs survive a restart; the ACL
APIs' checks and filters on the wire."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kernel.testing.embedded import EmbeddedBroker
from tests.integration.wire import (
    closed_by_broker,
    connect,
    decode_response,
    encode_request,
    recv_frame,
)

PLUGINS = ["metadata_kraft", "coordinator", "txn", "auth_sasl", "acl"]
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def acl_broker(broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
               **acl_settings: Any) -> EmbeddedBroker:
    users = tmp_path / "users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    return broker_factory(
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"],
         "inter.broker.listener.name": "SASL_PLAINTEXT"},
        plugins=PLUGINS,
        plugin_settings={
            "auth_sasl": {"plain.users.file": str(users),
                          "connection.failed.authentication.delay.ms": 0},
            "acl": {"super.users": "User:admin", **acl_settings},
        })


def conf(b: EmbeddedBroker, user: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user], **extra}


def admin(b: EmbeddedBroker, user: str = "admin") -> AdminClient:
    return AdminClient(conf(b, user))


def create_acls(b: EmbeddedBroker, *bindings: AclBinding) -> None:
    client = admin(b)  # held: a client collected early fails its futures
    for future in client.create_acls(list(bindings)).values():
        future.result(timeout=15)


def create_topics(b: EmbeddedBroker, *names: str, user: str = "admin") -> None:
    client = admin(b, user)
    for future in client.create_topics(
            [NewTopic(n, num_partitions=1, replication_factor=1) for n in names]).values():
        future.result(timeout=15)


def allow(user: str, rtype: ResourceType, name: str, op: AclOperation,
          pattern: ResourcePatternType = LITERAL, permission: AclPermissionType = ALLOW,
          host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", host, op, permission)


def produce_error(b: EmbeddedBroker, user: str, topic: str) -> KafkaError | None:
    """The delivery error of one record (None when it was written)."""
    errors: list[KafkaError | None] = []
    producer = Producer(conf(b, user, **{"message.timeout.ms": 10000}))
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors, "no delivery report"
    return errors[0]


def consume(b: EmbeddedBroker, user: str, topic: str, group: str,
            n: int) -> tuple[list[bytes], KafkaError | None]:
    consumer = Consumer(conf(b, user, **{"group.id": group, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    error: KafkaError | None = None
    deadline = time.monotonic() + 20
    while len(seen) < n and error is None and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is None:
            continue
        if msg.error() is not None:
            error = msg.error()
        else:
            seen.append(msg.value())
    if error is None and seen:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as e:
            error = e.args[0]
    consumer.close()
    return seen, error


def group_error(b: EmbeddedBroker, user: str, topic: str, group: str) -> KafkaError | None:
    """What a consumer of ``group`` subscribing to ``topic`` is told first."""
    consumer = Consumer(conf(b, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    error: KafkaError | None = None
    deadline = time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is not None:
            error = msg.error()
    consumer.close()
    return error


def test_a_user_may_write_one_topic_and_read_it_with_one_group_and_nothing_else(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path)
    create_topics(b, "orders", "payments")
    create_acls(b, allow("alice", ResourceType.TOPIC, "orders", AclOperation.WRITE),
                allow("alice", ResourceType.TOPIC, "orders", AclOperation.READ),
                allow("alice", ResourceType.GROUP, "orders-app", AclOperation.READ))

    assert produce_error(b, "alice", "orders") is None
    refused = produce_error(b, "alice", "payments")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    seen, error = consume(b, "alice", "orders", "orders-app", 1)
    assert (seen, error) == ([b"v"], None)
    error = group_error(b, "alice", "orders", "another-group")
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # Metadata shows alice only the topic she may describe (READ/WRITE imply DESCRIBE)
    topics = admin(b, "alice").list_topics(timeout=10).topics
    assert set(topics) == {"orders"}
    # and administration is refused
    with pytest.raises(KafkaException) as e:
        create_topics(b, "new-topic", user="alice")
    assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # an idempotent producer needs WRITE on some topic (KIP-679), not IDEMPOTENT_WRITE
    errors: list[KafkaError | None] = []
    idempotent = Producer(conf(b, "alice", **{"enable.idempotence": True,
                                              "message.timeout.ms": 10000}))
    idempotent.produce("orders", b"i", on_delivery=lambda err, _: errors.append(err))
    idempotent.flush(15)
    assert errors == [None]

    # bob has no ACL at all: nothing, and allow.everyone.if.no.acl.found is off
    refused = produce_error(b, "bob", "orders")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(admin(b, "bob").list_topics(timeout=10).topics) == set()


def test_prefixed_acls_deny_beats_allow_and_the_super_user_may_do_everything(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path)
    create_topics(b, "logs-app", "logs-secret", "metrics")
    create_acls(
        b,
        allow("alice", ResourceType.TOPIC, "logs-", AclOperation.WRITE, PREFIXED),
        allow("alice", ResourceType.TOPIC, "logs-secret", AclOperation.WRITE,
              permission=DENY),
        # a wildcard principal's ALLOW does not beat alice's own DENY either
        allow("*", ResourceType.TOPIC, "logs-secret", AclOperation.ALL),
    )
    assert produce_error(b, "alice", "logs-app") is None
    denied = produce_error(b, "alice", "logs-secret")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = produce_error(b, "alice", "metrics")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # bob is allowed logs-secret by User:*
    assert produce_error(b, "bob", "logs-secret") is None
    # the super user is never refused, whatever the ACLs
    create_acls(b, allow("admin", ResourceType.TOPIC, "*", AclOperation.ALL,
                         permission=DENY))
    assert produce_error(b, "admin", "metrics") is None


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path, **{"allow.everyone.if.no.acl.found": True})
    create_topics(b, "open", "guarded")
    create_acls(b, allow("bob", ResourceType.TOPIC, "guarded", AclOperation.WRITE))
    assert produce_error(b, "alice", "open") is None
    denied = produce_error(b, "alice", "guarded")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acls_are_listed_deleted_by_filter_and_survive_a_restart(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path)
    read_orders = allow("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    write_prefixed = allow("alice", ResourceType.TOPIC, "ord", AclOperation.WRITE, PREFIXED)
    group = allow("bob", ResourceType.GROUP, "g1", AclOperation.READ)
    create_acls(b, read_orders, write_prefixed, group)
    create_acls(b, read_orders)  # an ACL already stored is not stored twice

    def described(f: AclBindingFilter) -> set[AclBinding]:
        client = admin(b)
        return set(client.describe_acls(f).result(timeout=10))

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert described(everything) == {read_orders, write_prefixed, group}
    # MATCH: the ACLs that apply to topic "orders" (its literal and the prefix "ord")
    match = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert described(match) == {read_orders, write_prefixed}
    # ANY with a name: that exact name only
    exact = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.ANY, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert described(exact) == {read_orders}

    b.restart()
    assert described(everything) == {read_orders, write_prefixed, group}
    by_bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob",
                              None, AclOperation.ANY, AclPermissionType.ANY)
    client = admin(b)
    futures = client.delete_acls([by_bob])
    deleted = futures[by_bob].result(timeout=10)
    assert deleted == [group]
    b.restart()
    assert described(everything) == {read_orders, write_prefixed}


def test_kafka_python_admin_creates_and_lists_acls(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    b = acl_broker(broker_factory, tmp_path)
    client = KafkaAdminClient(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="PLAIN", sasl_plain_username="admin",
                              sasl_plain_password=USERS["admin"])
    try:
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KResourceType.TOPIC, "t-" + uuid.uuid4().hex,
                                                   ACLResourcePatternType.LITERAL))
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        listed, error = client.describe_acls(ACLFilter(
            principal="User:alice", host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KResourceType.ANY, None,
                                                   ACLResourcePatternType.ANY)))
        assert error.errno == 0 and listed == [acl]
    finally:
        client.close()


def _login(sock: Any, user: str) -> None:
    assert ask(sock, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    auth = ask(sock, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{USERS[user]}".encode()))
    assert auth.error_code == 0


def ask(sock: Any, body: Any) -> Any:
    sock.sendall(encode_request(body, correlation_id=7))
    frame = recv_frame(sock)
    assert frame is not None, "the broker closed the connection"
    return decode_response(frame, body.__api_key__, body.__version__)[1]


def creation(**values: Any) -> AclCreation:
    base: dict[str, Any] = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                            "principal": "User:alice", "host": "*", "operation": 3,
                            "permission_type": 3}
    return AclCreation(**{**base, **values})


ANY_FILTER: dict[str, Any] = {"resource_type_filter": 1, "resource_name_filter": None,
                              "pattern_type_filter": 1, "principal_filter": None,
                              "host_filter": None, "operation": 1, "permission_type": 1}


def test_the_acl_apis_check_as_kafka_does_on_the_wire(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path)
    denied = ErrorCode.cluster_authorization_failed
    with connect(b.bootstrap) as s:
        _login(s, "alice")  # no ACL on the cluster: DESCRIBE and ALTER are refused
        assert ask(s, DescribeAclsRequest(**ANY_FILTER)).error_code == denied
        created = ask(s, CreateAclsRequest(creations=(creation(),)))
        assert [r.error_code for r in created.results] == [denied]
        deleted = ask(s, DeleteAclsRequest(filters=(DeleteAclsFilter(**ANY_FILTER),)))
        assert [r.error_code for r in deleted.filter_results] == [denied]
    with connect(b.bootstrap) as s:
        _login(s, "admin")
        created = ask(s, CreateAclsRequest(creations=(
            creation(resource_type=4, resource_name="my-cluster"),
            creation(resource_name=""),
            creation(),
        )))
        assert [(r.error_code, r.error_message) for r in created.results] == [
            (ErrorCode.invalid_request,
             "The only valid name for the CLUSTER resource is kafka-cluster"),
            (ErrorCode.invalid_request, "Invalid empty resource name"),
            (ErrorCode.none, ""),
        ]
        # ANY or MATCH cannot make an ACL: Kafka fails the whole request unexpectedly
        for bad in (creation(resource_type=1), creation(resource_pattern_type=2),
                    creation(operation=1), creation(permission_type=1)):
            created = ask(s, CreateAclsRequest(creations=(creation(resource_name="u"), bad)))
            assert [(r.error_code, r.error_message) for r in created.results] == [
                (ErrorCode.unknown_server_error, None)] * 2
        described = ask(s, DescribeAclsRequest(**ANY_FILTER))
        assert [(r.resource_name, len(r.acls)) for r in described.resources] == [("t", 1)]
        created = ask(s, CreateAclsRequest(creations=(creation(
            resource_name="orders", principal="User:alice", operation=4),)))
        assert [r.error_code for r in created.results] == [ErrorCode.none]
    # InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE
    # on some topic (KIP-679); alice has WRITE on orders, bob nothing
    init = InitProducerIdRequest(transactional_id=None,
                                 transaction_timeout=datetime.timedelta(minutes=1),
                                 producer_id=-1, producer_epoch=-1)
    for user, expected in (("alice", ErrorCode.none),
                           ("bob", ErrorCode.cluster_authorization_failed)):
        with connect(b.bootstrap) as s:
            _login(s, user)
            assert ask(s, init).error_code == expected, user
    # an UNKNOWN code fails the request's parsing in Kafka: the connection is closed
    with connect(b.bootstrap) as s:
        _login(s, "admin")
        s.sendall(encode_request(CreateAclsRequest(creations=(creation(operation=0),)),
                                 correlation_id=8))
        assert closed_by_broker(s)
    with connect(b.bootstrap) as s:  # and the broker goes on serving
        _login(s, "admin")
        assert ask(s, DescribeAclsRequest(**ANY_FILTER)).error_code == ErrorCode.none


def test_a_transactional_producer_needs_write_on_its_transactional_id(
    broker_factory: Callable[..., EmbeddedBroker], tmp_path: Path,
) -> None:
    b = acl_broker(broker_factory, tmp_path)
    create_topics(b, "orders")
    create_acls(b, allow("alice", ResourceType.TOPIC, "orders", AclOperation.WRITE),
                allow("alice", ResourceType.TRANSACTIONAL_ID, "orders-tx-",
                      AclOperation.WRITE, PREFIXED))
    producer = Producer(conf(b, "alice", **{"transactional.id": "orders-tx-1"}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("orders", b"in a transaction")
    producer.commit_transaction(15)

    refused = Producer(conf(b, "alice", **{"transactional.id": "billing-tx-1"}))
    with pytest.raises(KafkaException) as e:
        refused.init_transactions(15)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
