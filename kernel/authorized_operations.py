"""KIP-430 authorized operations: the bit field of AclOperation codes a principal may use
on a resource, answered when a request asks for it (Metadata, DescribeCluster,
DescribeTopicPartitions, and the coordinator plugin's DescribeGroups)."""

from __future__ import annotations

from kernel.requests import RequestContext

# Kafka's "authorized operations not requested" sentinel.
OPS_NOT_REQUESTED = -(2**31)

# AclOperation codes that apply to each resource type (AclEntry.supportedOperations).
CLUSTER_OPERATIONS = {
    "CREATE": 5, "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
}
TOPIC_OPERATIONS = {
    "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
    "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11,
}
# Kafka 4 adds the group configs of KIP-848: DESCRIBE_CONFIGS, ALTER_CONFIGS.
GROUP_OPERATIONS = {"READ": 3, "DELETE": 6, "DESCRIBE": 8, "DESCRIBE_CONFIGS": 10,
                    "ALTER_CONFIGS": 11}
OPERATIONS = {"CLUSTER": CLUSTER_OPERATIONS, "TOPIC": TOPIC_OPERATIONS,
              "GROUP": GROUP_OPERATIONS}


def authorized_operations(ctx: RequestContext, resource_type: str, name: str) -> int:
    """The bits of the operations on ``resource_type`` ``name`` that the session may use."""
    authorize = ctx.authorize
    bits = 0
    for operation, code in OPERATIONS[resource_type].items():
        if authorize(ctx.session, operation, resource_type, name):
            bits |= 1 << code
    return bits
