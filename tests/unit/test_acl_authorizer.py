"""The acl plugin's decision rules, as Kafka's StandardAuthorizer applies them
(StandardAuthorizerTest, AclAuthorizerTest): wildcard and prefixed resources, wildcard
principals and hosts, implied DESCRIBE and DESCRIBE_CONFIGS, DENY beating ALLOW,
super users and allow.everyone.if.no.acl.found; and DescribeAcls/DeleteAcls filters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel.cluster import AclBinding
from plugins.acl.apis import AclFilter
from plugins.acl.authorizer import AclIndex, decide, decide_by_resource_type, parse_super_users
from plugins.acl.codes import AclOperation as Op
from plugins.acl.codes import AclPermissionType as Perm
from plugins.acl.codes import PatternType as Pat
from plugins.acl.codes import ResourceType as Res

ALICE, BOB = "User:alice", "User:bob"


def acl(name: str, op: Op, *, principal: str = ALICE, perm: Perm = Perm.ALLOW,
        pattern: Pat = Pat.LITERAL, rtype: Res = Res.TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(acls: list[AclBinding], op: Op, name: str, *, principal: str = ALICE,
            host: str = "10.0.0.1", rtype: Res = Res.TOPIC, super_users: str = "",
            allow_if_no_acl: bool = False) -> bool:
    return decide(AclIndex(acls), parse_super_users(super_users), allow_if_no_acl, principal,
                  host, op, rtype, name).allowed


def test_literal_prefixed_and_wildcard_resources() -> None:
    acls = [acl("orders", Op.READ), acl("logs-", Op.WRITE, pattern=Pat.PREFIXED),
            acl("*", Op.DESCRIBE_CONFIGS)]
    assert allowed(acls, Op.READ, "orders")
    assert not allowed(acls, Op.READ, "orders2")  # literal is not a prefix
    assert allowed(acls, Op.WRITE, "logs-app")
    assert allowed(acls, Op.WRITE, "logs-")
    assert not allowed(acls, Op.WRITE, "logs")
    assert allowed(acls, Op.DESCRIBE_CONFIGS, "anything")
    assert not allowed(acls, Op.READ, "orders", rtype=Res.GROUP)


def test_implied_operations_only_for_allow() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("t", op)], Op.DESCRIBE, "t"), op
    assert not allowed([acl("t", Op.CREATE)], Op.DESCRIBE, "t")
    assert allowed([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, "t")
    assert not allowed([acl("t", Op.READ)], Op.WRITE, "t")
    assert allowed([acl("t", Op.ALL)], Op.WRITE, "t")
    # a DENY of READ does not deny DESCRIBE, which WRITE allows
    assert allowed([acl("t", Op.WRITE), acl("t", Op.READ, perm=Perm.DENY)], Op.DESCRIBE, "t")
    assert not allowed([acl("t", Op.ALL), acl("t", Op.ALL, perm=Perm.DENY)], Op.DESCRIBE, "t")


def test_deny_beats_allow_wherever_either_matches() -> None:
    assert not allowed([acl("t", Op.READ), acl("t", Op.READ, perm=Perm.DENY)], Op.READ, "t")
    assert not allowed([acl("t", Op.READ),
                        acl("*", Op.READ, perm=Perm.DENY, principal="User:*")], Op.READ, "t")
    assert not allowed([acl("*", Op.ALL),
                        acl("t", Op.READ, perm=Perm.DENY, pattern=Pat.PREFIXED)], Op.READ, "topic")


def test_principals_and_hosts() -> None:
    acls = [acl("t", Op.READ, principal="User:*"), acl("u", Op.READ, host="10.0.0.2")]
    assert allowed(acls, Op.READ, "t", principal=BOB)
    assert not allowed(acls, Op.READ, "u", host="10.0.0.1")
    assert allowed(acls, Op.READ, "u", host="10.0.0.2")
    # another user's ACL does not allow alice, and makes the resource one with ACLs
    assert not allowed([acl("t", Op.READ, principal=BOB)], Op.READ, "t", allow_if_no_acl=True)


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    deny_all = [acl("*", Op.ALL, perm=Perm.DENY, principal="User:*")]
    assert allowed(deny_all, Op.WRITE, "t", super_users="User:bob; User:alice")
    assert not allowed(deny_all, Op.WRITE, "t", super_users="User:bob")
    assert not allowed([], Op.READ, "t")
    assert allowed([], Op.READ, "t", allow_if_no_acl=True)
    assert allowed([acl("other", Op.READ)], Op.READ, "t", allow_if_no_acl=True)


def _filter(rtype: Res = Res.ANY, name: str | None = None, pattern: Pat = Pat.ANY,
            principal: str | None = None, op: Op = Op.ANY, perm: Perm = Perm.ANY) -> AclFilter:
    f = SimpleNamespace(resource_type_filter=rtype, resource_name_filter=name,
                        pattern_type_filter=pattern, principal_filter=principal,
                        host_filter=None, operation=op, permission_type=perm)
    return AclFilter.of(f, "test")


@pytest.mark.parametrize(("f", "expected"), [
    (_filter(), {"lit", "pre", "wild"}),
    (_filter(Res.TOPIC, "logs-app", Pat.MATCH), {"lit", "pre", "wild"}),
    (_filter(Res.TOPIC, "logs-app", Pat.ANY), {"lit"}),
    (_filter(Res.TOPIC, "logs-", Pat.PREFIXED), {"pre"}),
    (_filter(Res.TOPIC, "logs-app", Pat.LITERAL), {"lit"}),
    (_filter(op=Op.WRITE), {"pre"}),
    (_filter(principal=BOB), {"wild"}),
    (_filter(Res.GROUP), set()),
])
def test_acl_filters_match_as_kafkas(f: AclFilter, expected: set[str]) -> None:
    acls = {"lit": acl("logs-app", Op.READ), "pre": acl("logs-", Op.WRITE, pattern=Pat.PREFIXED),
            "wild": acl("*", Op.READ, principal=BOB)}
    assert {k for k, a in acls.items() if f.matches(a)} == expected


def by_type(acls: list[AclBinding], op: Op = Op.WRITE, *, super_users: str = "",
            allow_if_no_acl: bool = False) -> bool:
    return decide_by_resource_type(AclIndex(acls), parse_super_users(super_users),
                                   allow_if_no_acl, ALICE, "10.0.0.1", op, Res.TOPIC)


def test_authorize_by_resource_type_as_kafkas_default() -> None:
    """KIP-679: an idempotent producer needs WRITE on some topic (or IDEMPOTENT_WRITE)."""
    assert not by_type([])
    assert by_type([], allow_if_no_acl=True)
    assert by_type([], super_users="User:alice")
    assert by_type([acl("orders", Op.WRITE)])
    assert by_type([acl("logs-", Op.ALL, pattern=Pat.PREFIXED)])
    assert not by_type([acl("orders", Op.READ)])
    assert not by_type([acl("orders", Op.WRITE, principal=BOB)])
    # a DENY covering every allowed name
    assert not by_type([acl("orders", Op.WRITE), acl("orders", Op.WRITE, perm=Perm.DENY)])
    assert not by_type([acl("orders", Op.WRITE),
                        acl("ord", Op.WRITE, perm=Perm.DENY, pattern=Pat.PREFIXED)])
    assert by_type([acl("orders", Op.WRITE), acl("payments", Op.WRITE),
                    acl("orders", Op.WRITE, perm=Perm.DENY)])
    assert not by_type([acl("orders", Op.WRITE), acl("*", Op.WRITE, perm=Perm.DENY)])
