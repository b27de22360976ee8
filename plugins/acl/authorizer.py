"""The ACL decision, with Kafka's StandardAuthorizer rules, over an index of the ACLs.

A request's action (principal, host, operation, resource type and name) is allowed when
- the principal is one of ``super.users``; else
- no ACL that matches it DENIES and one ALLOWS; else
- no ACL exists for the resource at all and ``allow.everyone.if.no.acl.found`` is set.

An ACL matches when its resource is the name (LITERAL), the wildcard ``*`` (LITERAL) or
a prefix of the name (PREFIXED); its principal is the action's or ``User:*``; its host
is the action's or ``*``; and its operation is the action's or ALL. An ALLOW of READ,
WRITE, DELETE or ALTER also allows DESCRIBE, and one of ALTER_CONFIGS also allows
DESCRIBE_CONFIGS; a DENY denies only its own operation (or ALL).

The index keeps LITERAL ACLs by name and PREFIXED ones by prefix, with the prefix
lengths that occur, so a decision looks up a few dict keys rather than scanning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kernel.api.cluster import AclBinding
from plugins.acl.codes import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    PatternType,
)

__all__ = ["AclIndex", "Decision", "decide", "decide_by_resource_type", "parse_super_users"]

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS,
                                       AclOperation.ALTER_CONFIGS})


@dataclass(slots=True)
class _ResourceAcls:
    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)


class AclIndex:
    """The ACLs of one metadata snapshot, by resource type; immutable once built."""

    __slots__ = ("_by_type",)

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        by_type: dict[int, _ResourceAcls] = {}
        for b in bindings:
            acls = by_type.setdefault(b.resource_type, _ResourceAcls())
            if b.pattern_type == PatternType.PREFIXED:
                acls.prefixed.setdefault(b.resource_name, []).append(b)
            else:
                acls.literal.setdefault(b.resource_name, []).append(b)
        for acls in by_type.values():
            acls.prefix_lengths = sorted({len(p) for p in acls.prefixed})
        self._by_type = by_type

    def of_type(self, resource_type: int) -> Iterable[AclBinding]:
        acls = self._by_type.get(resource_type)
        if acls is None:
            return
        for group in (*acls.literal.values(), *acls.prefixed.values()):
            yield from group

    def matching(self, resource_type: int, name: str) -> Iterable[list[AclBinding]]:
        """The ACL lists whose resource pattern matches ``name``: the literal name and
        the prefixes first, the wildcard last (Kafka looks at it only without a DENY)."""
        acls = self._by_type.get(resource_type)
        if acls is None:
            return
        found = acls.literal.get(name)
        if found is not None:
            yield found
        prefixed = acls.prefixed
        for length in acls.prefix_lengths:
            if length > len(name):
                break
            found = prefixed.get(name[:length])
            if found is not None:
                yield found
        found = acls.literal.get(WILDCARD)
        if found is not None and name != WILDCARD:
            yield found


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    # The ACL that decided, or why none did: "super user", "no ACL", "no matching ACL".
    reason: str


_SUPER_USER = Decision(True, "super user")


def decide(index: AclIndex, super_users: frozenset[str], allow_if_no_acl: bool,
           principal: str, host: str, operation: AclOperation, resource_type: int,
           name: str) -> Decision:
    if principal in super_users:
        return _SUPER_USER
    has_acls = False
    allow: AclBinding | None = None
    for acls in index.matching(resource_type, name):
        has_acls = True
        for acl in acls:
            result = _applies(acl, principal, host, operation)
            if result is None:
                continue
            if not result:
                return Decision(False, f"denied by {_describe(acl)}")
            allow = acl
    if allow is not None:
        return Decision(True, f"allowed by {_describe(allow)}")
    if not has_acls:
        return Decision(allow_if_no_acl, "no ACL for the resource")
    return Decision(False, "no matching ALLOW ACL")


def decide_by_resource_type(index: AclIndex, super_users: frozenset[str],
                            allow_if_no_acl: bool, principal: str, host: str,
                            operation: AclOperation, resource_type: int) -> bool:
    """Kafka's Authorizer.authorizeByResourceType: allowed on a made-up name (super
    users, allow.everyone.if.no.acl.found, wildcard ACLs), else when an ALLOW of the
    operation on some literal name or prefix is not covered by a DENY of it."""
    if decide(index, super_users, allow_if_no_acl, principal, host, operation,
              resource_type, "hardcode").allowed:
        return True
    deny_literal: set[str] = set()
    deny_prefixed: set[str] = set()
    allow: list[tuple[bool, str]] = []  # (literal, name)
    for acl in index.of_type(resource_type):
        if acl.host != WILDCARD and acl.host != host:
            continue
        if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
            continue
        if acl.operation != operation and acl.operation != AclOperation.ALL:
            continue
        literal = acl.pattern_type == PatternType.LITERAL
        if acl.permission_type == AclPermissionType.DENY:
            if literal and acl.resource_name == WILDCARD:
                return False
            (deny_literal if literal else deny_prefixed).add(acl.resource_name)
        elif acl.permission_type == AclPermissionType.ALLOW:
            if literal and acl.resource_name == WILDCARD:
                return True
            allow.append((literal, acl.resource_name))
    for literal, name in allow:
        if literal and name in deny_literal:
            continue
        if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
            return True
    return False


def _applies(acl: AclBinding, principal: str, host: str,
             operation: AclOperation) -> bool | None:
    """True (ALLOW) or False (DENY) when ``acl`` matches the action, None when not."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    allow = acl.permission_type == AclPermissionType.ALLOW
    if acl.operation != AclOperation.ALL and acl.operation != operation:
        if not allow:
            return None
        if operation == AclOperation.DESCRIBE:
            if acl.operation not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return allow


def _describe(acl: AclBinding) -> str:
    return (f"{AclPermissionType(acl.permission_type).name} "
            f"{AclOperation(acl.operation).name} for {acl.principal} from {acl.host} on "
            f"{PatternType(acl.pattern_type).name} {acl.resource_name!r}")


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons, as Kafka reads it."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())
