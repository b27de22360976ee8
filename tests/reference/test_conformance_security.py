"""The security APIs and authorization, differentially: the same frames to Apache Kafka
(SASL_PLAINTEXT with PLAIN and SCRAM, the StandardAuthorizer, super user admin) and to
Kafkernel configured the same way (auth_sasl, acl). Each case runs one script of
requests on sockets it opens and logs in itself, and returns what it saw: error codes,
messages, whether the broker closed the connection. Both answers must be equal."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kernel.protocol.sasl_client import SaslCredentials, ScramClient
from tests.integration.wire import connect, decode_response, encode_request, recv_frame
from tests.reference.conformance import body, documented, part
from tests.reference.conftest import SASL_USERS as USERS

CLOSED = "closed"
TIMEOUT = datetime.timedelta(seconds=30)


class Conversation:
    """One connection: requests in, decoded answers (or CLOSED) out."""

    def __init__(self, bootstrap: str) -> None:
        self.sock = connect(bootstrap)
        self.closed = False

    def ask(self, request: Any) -> Any:
        if self.closed:
            return CLOSED
        try:
            self.sock.sendall(encode_request(request, correlation_id=11))
            frame = recv_frame(self.sock)
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            frame = None
        if frame is None:
            self.closed = True
            return CLOSED
        return decode_response(frame, request.__api_key__, request.__version__)[1]

    def login(self, user: str, password: str | None = None) -> Any:
        self.ask(body(17, 1, mechanism="PLAIN"))
        secret = USERS[user] if password is None else password
        return self.ask(body(36, 2, auth_bytes=f"\0{user}\0{secret}".encode()))

    def closed_now(self) -> bool:
        """Whether the broker has closed the connection (waits up to 2 s)."""
        if self.closed:
            return True
        self.sock.settimeout(2)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def error_of(answer: Any) -> Any:
    return CLOSED if answer is CLOSED else (answer.error_code, answer.error_message)


# -- SASL ---------------------------------------------------------------------------


def handshake_offers_the_enabled_mechanisms(b: str) -> Any:
    with Conversation(b) as c:
        answer = c.ask(body(17, 1, mechanism="PLAIN"))
        # (Kafka's order comes from a map of the enabled mechanisms: not configured order)
        return answer.error_code, sorted(answer.mechanisms)


def an_unsupported_mechanism_is_refused_and_closed(b: str) -> Any:
    with Conversation(b) as c:
        answer = c.ask(body(17, 1, mechanism="GSSAPI"))
        return answer.error_code, sorted(answer.mechanisms), c.closed_now()


def plain_login_succeeds_without_a_session_lifetime(b: str) -> Any:
    with Conversation(b) as c:
        answer = c.login("alice")
        return answer.error_code, answer.error_message, answer.auth_bytes, \
            answer.session_lifetime, c.closed_now()


def a_wrong_password_is_refused_with_kafkas_message_and_closed(b: str) -> Any:
    with Conversation(b) as c:
        return error_of(c.login("alice", "wrong")), c.closed_now()


def an_unknown_user_is_refused_like_a_wrong_password(b: str) -> Any:
    with Conversation(b) as c:
        answer = c.ask(body(17, 1, mechanism="PLAIN"))
        answer = c.ask(body(36, 2, auth_bytes=b"\0mallory\0secret"))
        return error_of(answer), c.closed_now()


def garbage_in_sasl_authenticate(b: str) -> Any:
    with Conversation(b) as c:
        c.ask(body(17, 1, mechanism="PLAIN"))
        return error_of(c.ask(body(36, 2, auth_bytes=b"garbage"))), c.closed_now()


def a_kafka_request_before_authentication_closes(b: str) -> Any:
    with Conversation(b) as c:
        return c.ask(body(3, 12, topics=None, allow_auto_topic_creation=False))


def sasl_authenticate_without_a_handshake_closes(b: str) -> Any:
    with Conversation(b) as c:
        answer = c.ask(body(36, 2, auth_bytes=b"\0alice\0alice-secret"))
        return error_of(answer) if answer is not CLOSED else CLOSED


# sasl.server.max.receive.size's default: the largest frame read before authentication.
SASL_MAX_RECEIVE_SIZE = 524288


def _authenticate_frame(size: int) -> bytes:
    """A SaslAuthenticate v2 frame of ``size`` bytes (after its prefix): PLAIN for alice
    with a password that pads it."""
    pad = size
    while True:
        frame = encode_request(body(36, 2, auth_bytes=b"\0alice\0" + b"p" * pad),
                               correlation_id=11)
        over = len(frame) - 4 - size
        if over == 0:
            return frame
        pad -= over


def frames_over_sasl_server_max_receive_size_close_before_they_are_read(b: str) -> Any:
    """At the limit a PLAIN token is read and refused; one byte over, after a v1 or a v0
    handshake, or a claim of 100 MB with only its start sent, the connection is closed
    unanswered."""
    seen = []
    with Conversation(b) as c:
        c.ask(body(17, 1, mechanism="PLAIN"))
        c.sock.sendall(_authenticate_frame(SASL_MAX_RECEIVE_SIZE))
        frame = recv_frame(c.sock)
        seen.append(None if frame is None else error_of(decode_response(frame, 36, 2)[1]))
    for version, data in ((1, _authenticate_frame(SASL_MAX_RECEIVE_SIZE + 1)),
                          (1, struct.pack(">i", 100_000_000) + bytes(64 * 1024)),
                          (0, struct.pack(">i", SASL_MAX_RECEIVE_SIZE + 1) + bytes(1024))):
        with Conversation(b) as c:
            c.ask(body(17, version, mechanism="PLAIN"))
            with contextlib.suppress(OSError):
                c.sock.sendall(data)
            seen.append(c.closed_now())
    return seen


def a_second_handshake_after_login_is_illegal_sasl_state(b: str) -> Any:
    with Conversation(b) as c:
        c.login("alice")
        answer = c.ask(body(17, 1, mechanism="PLAIN"))
        return answer.error_code, c.closed_now()


# -- SCRAM credentials --------------------------------------------------------------


def _upsertion(name: str, mechanism: int = 1, iterations: int = 4096) -> Any:
    salt = b"0123456789abcdef"
    algorithm = "sha256" if mechanism == 1 else "sha512"
    salted = hashlib.pbkdf2_hmac(algorithm, b"carol-secret", salt, max(iterations, 1))
    return part(51, 0, "ScramCredentialUpsertion", name=name, mechanism=mechanism,
                iterations=iterations, salt=salt, salted_password=salted)


def _alter(c: Conversation, upsertions: tuple[Any, ...] = (),
           deletions: tuple[Any, ...] = ()) -> Any:
    answer = c.ask(body(51, 0, deletions=deletions, upsertions=upsertions))
    return CLOSED if answer is CLOSED else sorted(
        (r.user, r.error_code, r.error_message) for r in answer.results)


def scram_credentials_are_checked_as_kafka_checks_them(b: str) -> Any:
    with Conversation(b) as c:
        c.login("admin")
        return [
            _alter(c, (_upsertion("carol"),)),
            _alter(c, (_upsertion("dave", iterations=1000),)),
            _alter(c, (_upsertion("erin", iterations=20000),)),
            _alter(c, (_upsertion("frank", mechanism=0),)),
            _alter(c, (_upsertion(""),)),
            _alter(c, (_upsertion("gina"), _upsertion("gina", mechanism=2))),
            _alter(c, deletions=(part(51, 0, "ScramCredentialDeletion", name="nobody",
                                      mechanism=1),)),
        ]


def scram_credentials_are_described(b: str) -> Any:
    with Conversation(b) as c:
        c.login("admin")
        _alter(c, (_upsertion("hank", iterations=8192),))
        answer = c.ask(body(50, 0, users=(part(50, 0, "UserName", name="hank"),
                                          part(50, 0, "UserName", name="nobody"))))
        return answer.error_code, sorted(
            (r.user, r.error_code, r.error_message,
             tuple((i.mechanism, i.iterations) for i in r.credential_infos))
            for r in answer.results)


def a_scram_user_created_by_the_admin_logs_in(b: str) -> Any:
    with Conversation(b) as c:
        c.login("admin")
        _alter(c, (_upsertion("ivan"),))
    time.sleep(0.5)  # Kafka applies the credential from its metadata log
    with Conversation(b) as c:
        return _scram_login(c, "ivan", "carol-secret"), c.closed_now()


def _scram_login(c: Conversation, user: str, password: str) -> Any:
    """SCRAM-SHA-256 with the client brokers log in to each other with (so Kafka's own
    SCRAM server checks it too): the server's final signature must verify."""
    c.ask(body(17, 1, mechanism="SCRAM-SHA-256"))
    client = ScramClient(SaslCredentials("SCRAM-SHA-256", user, password),
                         nonce="fyko+d2lbbFgONRv9qkxdawL")
    first = c.ask(body(36, 2, auth_bytes=client.first()))
    if first is CLOSED or first.error_code:
        return error_of(first)
    final = c.ask(body(36, 2, auth_bytes=client.next(first.auth_bytes)))
    if final is not CLOSED and not final.error_code:
        assert client.next(final.auth_bytes) is None
    return error_of(final)


def describing_scram_credentials_needs_describe_on_the_cluster(b: str) -> Any:
    with Conversation(b) as c:
        c.login("alice")
        return error_of(c.ask(body(50, 0, users=None)))


def altering_scram_credentials_needs_alter_on_the_cluster(b: str) -> Any:
    with Conversation(b) as c:
        c.login("alice")
        return _alter(c, (_upsertion("judy"),))


# -- ACLs ---------------------------------------------------------------------------


def _creation(**values: Any) -> Any:
    base: dict[str, Any] = {"resource_type": 2, "resource_name": "conf-t",
                            "resource_pattern_type": 3, "principal": "User:alice",
                            "host": "*", "operation": 3, "permission_type": 3}
    return part(30, 3, "AclCreation", **{**base, **values})


ANY_FILTER: dict[str, Any] = {"resource_type_filter": 1, "resource_name_filter": None,
                              "pattern_type_filter": 1, "principal_filter": None,
                              "host_filter": None, "operation": 1, "permission_type": 1}


def _described(c: Conversation, **values: Any) -> Any:
    answer = c.ask(body(29, 3, **{**ANY_FILTER, **values}))
    if answer is CLOSED:
        return CLOSED
    return answer.error_code, sorted(
        (r.resource_type, r.resource_name, r.pattern_type,
         tuple(sorted((a.principal, a.host, a.operation, a.permission_type) for a in r.acls)))
        for r in answer.resources)


def acls_are_created_checked_described_and_deleted(b: str) -> Any:
    with Conversation(b) as c:
        c.login("admin")
        refused = [
            [(r.error_code, r.error_message) for r in c.ask(body(30, 3, creations=(
                _creation(resource_name="conf-u"), bad))).results]
            for bad in (_creation(resource_type=1), _creation(resource_pattern_type=2),
                        _creation(resource_pattern_type=1), _creation(operation=1),
                        _creation(permission_type=1))]
        created = c.ask(body(30, 3, creations=(
            _creation(resource_type=4, resource_name="my-cluster"),
            _creation(resource_name=""),
            _creation(),
            _creation(resource_name="conf-", resource_pattern_type=4, operation=4),
            _creation(resource_type=3, resource_name="conf-g", principal="User:*"),
            _creation(resource_type=5, resource_name="conf-tx", operation=4,
                      permission_type=2),
        )))
        results = [(r.error_code, r.error_message) for r in created.results]
        time.sleep(0.5)  # Kafka's controller commits, then its authorizer applies
        everything = _described(c, resource_name_filter=None)
        match = _described(c, resource_type_filter=2, resource_name_filter="conf-topic",
                           pattern_type_filter=2)
        by_principal = _described(c, principal_filter="User:*")
        deleted = c.ask(body(31, 3, filters=(
            part(31, 3, "DeleteAclsFilter", **{**ANY_FILTER, "resource_type_filter": 3}),
            part(31, 3, "DeleteAclsFilter", **{**ANY_FILTER, "principal_filter": "User:x"}),
        )))
        removed = [(r.error_code, sorted((m.resource_type, m.resource_name, m.principal)
                                         for m in r.matching_acls))
                   for r in deleted.filter_results]
        time.sleep(0.5)
        after = _described(c)
        return refused, results, everything, match, by_principal, removed, after


def acl_apis_need_the_cluster_acls(b: str) -> Any:
    """Codes only: Kafka's message here is its internal request's toString."""
    with Conversation(b) as c:
        c.login("alice")
        created = c.ask(body(30, 3, creations=(_creation(resource_name="nope"),)))
        deleted = c.ask(body(31, 3, filters=(part(31, 3, "DeleteAclsFilter", **ANY_FILTER),)))
        return ([r.error_code for r in created.results], _described(c)[0],
                [r.error_code for r in deleted.filter_results])


def an_unknown_acl_code_closes_the_connection(b: str) -> Any:
    with Conversation(b) as c:
        c.login("admin")
        return c.ask(body(30, 3, creations=(_creation(operation=0),))), c.closed_now()


# -- authorization of other APIs ----------------------------------------------------


def an_unprivileged_user_is_refused_as_kafka_refuses(b: str) -> Any:
    topic = "conf-secured"
    with Conversation(b) as c:
        c.login("admin")
        c.ask(body(19, 7, topics=(part(19, 7, "CreatableTopic", name=topic, num_partitions=1,
                                       replication_factor=1),), timeout=TIMEOUT))
    time.sleep(0.5)
    with Conversation(b) as c:
        c.login("alice")
        seen: dict[str, Any] = {}
        answer = c.ask(body(3, 12, topics=None, allow_auto_topic_creation=False))
        seen["metadata all"] = sorted(t.name for t in answer.topics)
        answer = c.ask(body(3, 12, topics=(part(3, 12, "MetadataRequestTopic", name=topic),),
                            allow_auto_topic_creation=False))
        seen["metadata named"] = [(t.name, t.error_code) for t in answer.topics]
        answer = c.ask(body(19, 7, topics=(part(19, 7, "CreatableTopic", name="conf-alice",
                                                num_partitions=1, replication_factor=1),),
                            timeout=TIMEOUT))
        seen["create topics"] = [(t.name, t.error_code) for t in answer.topics]
        answer = c.ask(body(10, 4, key="conf-group", key_type=0,
                            coordinator_keys=("conf-group",)))
        seen["find coordinator"] = [(k.key, k.error_code) for k in answer.coordinators]
        answer = c.ask(body(32, 4, resources=(part(32, 4, "DescribeConfigsResource",
                                                   resource_type=2, resource_name=topic,
                                                   configuration_keys=None),),
                            include_synonyms=False, include_documentation=False))
        seen["describe configs"] = [(r.resource_name, r.error_code) for r in answer.results]
        seen["init producer id"] = _init_producer_id(c)
        answer = c.ask(body(22, 4, transactional_id="conf-tx",
                            transaction_timeout=datetime.timedelta(seconds=60),
                            producer_id=-1, producer_epoch=-1))
        seen["init producer id transactional"] = answer.error_code
        answer = c.ask(body(16, 4, states_filter=()))
        seen["list groups"] = (answer.error_code, list(answer.groups))
        answer = c.ask(body(20, 6, topics=(part(20, 6, "DeleteTopicState", name=topic),),
                            topic_names=(topic,), timeout=TIMEOUT))
        seen["delete topics"] = [(r.name, r.error_code) for r in answer.responses]
        return seen


def cluster_apis_need_the_cluster_permissions(b: str) -> Any:
    """ElectLeaders, AlterPartitionReassignments and UpdateFeatures need ALTER on the cluster,
    ListPartitionReassignments and DescribeLogDirs DESCRIBE: an unprivileged user gets
    CLUSTER_AUTHORIZATION_FAILED (at the top and, where the answer has partitions, on
    each one asked for) and nothing else. Whether there is a message is compared, not
    its text: Kafka's names its internal request's toString."""
    topic = "conf-cluster-apis"
    with Conversation(b) as c:
        c.login("alice")
        seen: dict[str, Any] = {}
        for v in (0, 2):
            answer = c.ask(body(43, v, election_type=0, timeout=TIMEOUT, topic_partitions=(
                part(43, v, "TopicPartitions", topic=topic, partitions=(0, 1)),)))
            seen[f"elect leaders v{v}"] = (getattr(answer, "error_code", None), sorted(
                (r.topic, p.partition_id, p.error_code, bool(p.error_message))
                for r in answer.replica_election_results for p in r.partition_result))
        answer = c.ask(body(43, 2, election_type=0, timeout=TIMEOUT, topic_partitions=None))
        seen["elect leaders of all"] = (answer.error_code,
                                        list(answer.replica_election_results))
        answer = c.ask(body(45, 1, timeout=TIMEOUT, allow_replication_factor_change=True,
                            topics=(part(45, 1, "ReassignableTopic", name=topic, partitions=(
                                part(45, 1, "ReassignablePartition", partition_index=0,
                                     replicas=(1,)),)),)))
        seen["alter reassignments"] = (answer.error_code, bool(answer.error_message), sorted(
            (t.name, p.partition_index, p.error_code, bool(p.error_message))
            for t in answer.responses for p in t.partitions))
        answer = c.ask(body(46, 0, timeout=TIMEOUT, topics=None))
        seen["list reassignments"] = (answer.error_code, bool(answer.error_message),
                                      list(answer.topics))
        for v in (1, 4):
            answer = c.ask(body(35, v, topics=None))
            seen[f"describe log dirs v{v}"] = (getattr(answer, "error_code", None),
                                               list(answer.results))
        for v in (1, 2):  # UpdateFeatures, validate-only: nothing changes either way
            answer = c.ask(body(57, v, timeout=TIMEOUT, validate_only=True, feature_updates=(
                part(57, v, "FeatureUpdateKey", feature="metadata.version",
                     max_version_level=30, upgrade_type=1),)))
            seen[f"update features v{v}"] = (answer.error_code, bool(answer.error_message),
                                             list(getattr(answer, "results", ())))
        return seen


def _init_producer_id(c: Conversation) -> Any:
    """Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first producer-id block has
    come from its controller; clients retry, and so does this."""
    for _ in range(50):
        answer = c.ask(body(22, 4, transactional_id=None,
                            transaction_timeout=datetime.timedelta(seconds=60),
                            producer_id=-1, producer_epoch=-1))
        if answer is CLOSED or answer.error_code != ErrorCode.coordinator_load_in_progress:
            return CLOSED if answer is CLOSED else answer.error_code
        time.sleep(0.1)
    return answer.error_code


CASES: list[Any] = [
    handshake_offers_the_enabled_mechanisms,
    an_unsupported_mechanism_is_refused_and_closed,
    plain_login_succeeds_without_a_session_lifetime,
    a_wrong_password_is_refused_with_kafkas_message_and_closed,
    an_unknown_user_is_refused_like_a_wrong_password,
    garbage_in_sasl_authenticate,
    a_kafka_request_before_authentication_closes,
    sasl_authenticate_without_a_handshake_closes,
    frames_over_sasl_server_max_receive_size_close_before_they_are_read,
    a_second_handshake_after_login_is_illegal_sasl_state,
    scram_credentials_are_checked_as_kafka_checks_them,
    scram_credentials_are_described,
    a_scram_user_created_by_the_admin_logs_in,
    pytest.param(describing_scram_credentials_needs_describe_on_the_cluster,
                 marks=pytest.mark.xfail(strict=True, reason=documented("D15"))),
    pytest.param(altering_scram_credentials_needs_alter_on_the_cluster, marks=pytest.mark.xfail(
        strict=True, reason=documented("D15"))),
    acls_are_created_checked_described_and_deleted,
    acl_apis_need_the_cluster_acls,
    an_unknown_acl_code_closes_the_connection,
    an_unprivileged_user_is_refused_as_kafka_refuses,
    cluster_apis_need_the_cluster_permissions,
]


@pytest.mark.parametrize("case", CASES, ids=[
    getattr(c, "values", [c])[0].__name__ for c in CASES])
def test_security_conformance(case: Callable[[str], Any], sasl_kafka: str,
                              sasl_kafkernel: str) -> None:
    assert case(sasl_kafkernel) == case(sasl_kafka)

