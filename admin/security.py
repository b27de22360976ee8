"""``kafkernel user`` (SCRAM credentials, as kafka-configs --entity-type users) and
``kafkernel acl`` (as kafka-acls): list, set or add, delete or remove."""

from __future__ import annotations

import argparse
from typing import Any

from admin.client import ClientOptions, result
from admin.errors import AdminError
from admin.kafka_python import call, error_text
from admin.output import Table, View

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
RESOURCES = {"topic": "TOPIC", "group": "GROUP", "cluster": "BROKER",
             "transactional_id": "TRANSACTIONAL_ID"}


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def list_users(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    """Through kafka-python: librdkafka (2.16) aborts the process when the broker refuses
    a DescribeUserScramCredentials of every user."""
    described = call(options, "DescribeUserScramCredentials",
                     lambda admin: admin.describe_user_scram_credentials(args.users or None))
    rows = []
    for user, d in described.items():
        if d["error"]:
            raise AdminError(f"describing {user}: {d['error']}")
        rows += [{"user": user, "mechanism": info["mechanism"].name.replace("_", "-"),
                  "iterations": info["iterations"]} for info in d["credential_infos"]]
    rows.sort(key=lambda r: (r["user"], r["mechanism"]))
    return View(rows, [Table(None, ["USER", "MECHANISM", "ITERATIONS"],
                             [list(r.values()) for r in rows])])


def set_user(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    info = ScramCredentialInfo(_mechanism(args.mechanism), args.iterations)
    futures = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(args.user, info, args.password.encode())],
        request_timeout=options.timeout_s)
    result(futures[args.user], options, f"setting {args.user}'s credentials")
    return View({"user": args.user, "mechanism": args.mechanism,
                 "iterations": args.iterations},
                lines=[f"user {args.user}: {args.mechanism} credentials set"])


def delete_user(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import UserScramCredentialDeletion

    futures = client.alter_user_scram_credentials(
        [UserScramCredentialDeletion(args.user, _mechanism(args.mechanism))],
        request_timeout=options.timeout_s)
    result(futures[args.user], options, f"deleting {args.user}'s credentials")
    return View({"user": args.user, "mechanism": args.mechanism, "deleted": True},
                lines=[f"user {args.user}: {args.mechanism} credentials deleted"])


def _resource(args: argparse.Namespace, any_if_none: bool) -> tuple[Any, str | None]:
    from confluent_kafka.admin import ResourceType

    chosen = [(kind, getattr(args, kind)) for kind in RESOURCES
              if getattr(args, kind) not in (None, False)]
    if len(chosen) > 1:
        raise AdminError("one resource at a time: --topic, --group, --cluster or "
                         "--transactional-id")
    if not chosen:
        if any_if_none:
            return ResourceType.ANY, None
        raise AdminError("name a resource: --topic, --group, --cluster or "
                         "--transactional-id")
    kind, name = chosen[0]
    return ResourceType[RESOURCES[kind]], "kafka-cluster" if kind == "cluster" else name


def _filter(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    restype, name = _resource(args, any_if_none=True)
    return AclBindingFilter(
        restype, name,
        ResourcePatternType[args.pattern_type.upper()] if args.pattern_type
        else ResourcePatternType.ANY,
        args.principal, args.host,
        AclOperation[args.operation.upper()] if args.operation else AclOperation.ANY,
        AclPermissionType[args.permission.upper()] if args.permission
        else AclPermissionType.ANY)


def _row(principal: str, host: str, operation: str, permission: str, resource_type: str,
         resource: str, pattern_type: str) -> dict[str, Any]:
    # librdkafka names the cluster resource BROKER; Kafka and its tools say CLUSTER
    return {"principal": principal, "host": host, "operation": operation,
            "permission": permission,
            "resource_type": "CLUSTER" if resource_type == "BROKER" else resource_type,
            "resource": resource, "pattern_type": pattern_type}


def _sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple(str(v) for v in r.values()))


def _rows(bindings: list[Any]) -> list[dict[str, Any]]:
    """confluent-kafka's AclBindings as rows."""
    return _sorted_rows([_row(b.principal, b.host, b.operation.name, b.permission_type.name,
                              b.restype.name, b.name, b.resource_pattern_type.name)
                         for b in bindings])


ACL_COLUMNS = ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE TYPE", "RESOURCE",
               "PATTERN"]


def list_acls(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    """Through kafka-python: librdkafka (2.16) answers a DescribeAcls that the broker
    refused (CLUSTER_AUTHORIZATION_FAILED) with an empty list, which would show an
    operator without the right no ACLs instead of the refusal."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    restype, name = _resource(args, any_if_none=True)
    kind = "CLUSTER" if restype.name == "BROKER" else restype.name
    acl_filter = ACLFilter(
        principal=args.principal, host=args.host,
        operation=ACLOperation[(args.operation or "any").upper()],
        permission_type=ACLPermissionType[(args.permission or "any").upper()],
        resource_pattern=ResourcePatternFilter(
            ResourceType[kind], name,
            ACLResourcePatternType[(args.pattern_type or "any").upper()]))
    acls, error = call(options, "DescribeAcls", lambda admin: admin.describe_acls(acl_filter))
    if getattr(error, "errno", 0):
        raise AdminError(f"DescribeAcls: {error_text(error)}")
    rows = _sorted_rows([_row(a.principal, a.host, a.operation.name, a.permission_type.name,
                              a.resource_pattern.resource_type.name,
                              a.resource_pattern.resource_name,
                              a.resource_pattern.pattern_type.name) for a in acls])
    return View(rows, [Table(None, ACL_COLUMNS, [list(r.values()) for r in rows])])


def add_acl(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    restype, name = _resource(args, any_if_none=False)
    if not args.principal or not args.operation:
        raise AdminError("an ACL needs --principal (e.g. User:alice) and --operation")
    binding = AclBinding(restype, name,
                         ResourcePatternType[(args.pattern_type or "literal").upper()],
                         args.principal, args.host or "*",
                         AclOperation[args.operation.upper()],
                         AclPermissionType[(args.permission or "allow").upper()])
    futures = client.create_acls([binding], request_timeout=options.timeout_s)
    result(futures[binding], options, "CreateAcls")
    rows = _rows([binding])
    return View(rows, [Table("added", ACL_COLUMNS, [list(r.values()) for r in rows])])


def remove_acls(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    acl_filter = _filter(args)
    futures = client.delete_acls([acl_filter], request_timeout=options.timeout_s)
    rows = _rows(result(futures[acl_filter], options, "DeleteAcls"))
    return View(rows, [Table("removed", ACL_COLUMNS, [list(r.values()) for r in rows])])


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    user = sub.add_parser("user", help="SCRAM users: list, set, delete")
    commands = user.add_subparsers(dest="user_command", required=True)
    p = commands.add_parser("list", parents=[common], help="users and their mechanisms")
    p.add_argument("users", nargs="*", metavar="user")
    p.set_defaults(admin=list_users)
    p = commands.add_parser("set", parents=[common], help="set a user's SCRAM credentials")
    p.add_argument("user")
    p.add_argument("--password", required=True)
    p.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-256")
    p.add_argument("--iterations", type=int, default=4096)
    p.set_defaults(admin=set_user)
    p = commands.add_parser("delete", parents=[common], help="delete SCRAM credentials")
    p.add_argument("user")
    p.add_argument("--mechanism", choices=MECHANISMS, default="SCRAM-SHA-256")
    p.set_defaults(admin=delete_user)

    acl = sub.add_parser("acl", help="ACLs: list, add, remove")
    commands = acl.add_subparsers(dest="acl_command", required=True)
    for name, func, text in (("list", list_acls, "ACLs matching a filter"),
                             ("add", add_acl, "add an ACL"),
                             ("remove", remove_acls, "remove the ACLs matching a filter")):
        p = commands.add_parser(name, parents=[common], help=text)
        p.add_argument("--principal", help="e.g. User:alice")
        p.add_argument("--host", help="default * (any)")
        p.add_argument("--operation", help="e.g. READ, WRITE, DESCRIBE, ALL")
        p.add_argument("--permission", choices=["allow", "deny"])
        p.add_argument("--pattern-type", choices=["literal", "prefixed", "match", "any"])
        p.add_argument("--topic")
        p.add_argument("--group")
        p.add_argument("--cluster", action="store_true")
        p.add_argument("--transactional-id")
        p.set_defaults(admin=func)
