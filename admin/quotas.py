"""``kafkernel quota`` (client quotas, as kafka-configs --entity-type users|clients|ips):
list, set, delete, through DescribeClientQuotas and AlterClientQuotas. Neither
confluent-kafka nor kafka-python offers these two APIs: the requests go through
kafka-python's connection manager, as its own admin calls do."""

from __future__ import annotations

import argparse
from typing import Any

from admin.client import ClientOptions
from admin.errors import AdminError
from admin.kafka_python import call
from admin.output import Table, View

EXACT, DEFAULT = 0, 1
KINDS = (("user", "user"), ("client_id", "client-id"), ("ip", "ip"))


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name or None for the default) from --user/--user-default, ..."""
    entity: list[tuple[str, str | None]] = []
    for option, kind in KINDS:
        name, default = getattr(args, option), getattr(args, f"{option}_default")
        if name is not None and default:
            raise AdminError(f"--{option.replace('_', '-')} or its -default, not both")
        if name is not None or default:
            entity.append((kind, name))
    return entity


def _send(options: ClientOptions, what: str, request: Any) -> Any:
    async def ask(admin: Any) -> Any:
        return await admin._manager.send(request)

    return call(options, what, lambda admin: admin._manager.run(ask, admin))


def _label(entity: Any) -> str:
    return ", ".join(f"{e.entity_type}={'<default>' if e.entity_name is None else e.entity_name}"
                     for e in entity)


def list_quotas(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from kafka.protocol.admin import DescribeClientQuotasRequest

    components = [(kind, EXACT if name is not None else DEFAULT, name)
                  for kind, name in _entity(args)]
    answer = _send(options, "DescribeClientQuotas", DescribeClientQuotasRequest(
        components=components, strict=args.strict))
    if answer.error_code:
        raise AdminError(f"DescribeClientQuotas: {answer.error_message or answer.error_code}")
    rows = sorted(({"entity": _label(e.entity), "key": v.key, "value": v.value}
                   for e in answer.entries for v in e.values),
                  key=lambda r: (r["entity"], r["key"]))
    return View(rows, [Table(None, ["ENTITY", "KEY", "VALUE"],
                             [list(r.values()) for r in rows])])


def _alter(args: argparse.Namespace, options: ClientOptions,
           ops: list[tuple[str, float, bool]], done: str) -> View:
    from kafka.protocol.admin import AlterClientQuotasRequest

    entity = _entity(args)
    if not entity:
        raise AdminError("name an entity: --user, --client-id, --ip or their -default")
    answer = _send(options, "AlterClientQuotas", AlterClientQuotasRequest(
        entries=[(entity, ops)], validate_only=args.validate_only))
    for entry in answer.entries:
        if entry.error_code:
            raise AdminError(f"{_label(entry.entity)}: {entry.error_message or entry.error_code}")
    label = ", ".join(f"{k}={'<default>' if n is None else n}" for k, n in entity)
    keys = {key: (None if remove else value) for key, value, remove in ops}
    return View({"entity": label, "quotas": keys, "validate_only": args.validate_only},
                lines=[f"{label}: {done}" + (" (validated only)" if args.validate_only else "")])


def set_quotas(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    ops = []
    for item in args.quotas:
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError(item)
            ops.append((key, float(value), False))
        except ValueError:
            raise AdminError(f"{item!r} is not key=number") from None
    return _alter(args, options, ops, "set " + ", ".join(args.quotas))


def delete_quotas(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    return _alter(args, options, [(key, 0.0, True) for key in args.keys],
                  "deleted " + ", ".join(args.keys))


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    quota = sub.add_parser("quota", help="client quotas: list, set, delete")
    commands = quota.add_subparsers(dest="quota_command", required=True)
    entity = argparse.ArgumentParser(add_help=False)
    for option, kind in KINDS:
        flag = option.replace("_", "-")
        entity.add_argument(f"--{flag}", dest=option, help=f"the {kind} entity's name")
        entity.add_argument(f"--{flag}-default", dest=f"{option}_default",
                            action="store_true", help=f"the default {kind} entity")
    p = commands.add_parser("list", parents=[common, entity],
                            help="quotas of the entities named (every entity if none)")
    p.add_argument("--strict", action="store_true",
                   help="only entities of exactly the types named")
    p.set_defaults(admin=list_quotas)
    p = commands.add_parser("set", parents=[common, entity], help="set quota keys")
    p.add_argument("quotas", nargs="+", metavar="key=value",
                   help="e.g. producer_byte_rate=1048576")
    p.add_argument("--validate-only", action="store_true")
    p.set_defaults(admin=set_quotas)
    p = commands.add_parser("delete", parents=[common, entity], help="remove quota keys")
    p.add_argument("keys", nargs="+", metavar="key")
    p.add_argument("--validate-only", action="store_true")
    p.set_defaults(admin=delete_quotas)

