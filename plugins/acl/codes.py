"""Kafka's ACL codes (org.apache.kafka.common.acl / .resource), as they travel in
CreateAcls, DescribeAcls and DeleteAcls and as AccessControlEntryRecord stores them."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "known",
]

WILDCARD = "*"  # any resource name (LITERAL) or any host
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def known(enum: type[IntEnum], code: int) -> IntEnum:
    """``code`` as Kafka's fromCode reads it: a code it does not know is UNKNOWN."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)
