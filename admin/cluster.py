"""``kafkernel cluster describe``, ``cluster elect-leaders`` (admin/leader_election.py)
and broker configs (``kafkernel config describe``,
``kafkernel config alter``, as kafka-configs --entity-type brokers)."""

from __future__ import annotations

import argparse
from typing import Any

from admin import leader_election
from admin.client import ClientOptions, result
from admin.configs import alter
from admin.output import Table, View


def describe_cluster(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    cluster = result(client.describe_cluster(request_timeout=options.timeout_s), options,
                     "DescribeCluster")
    controller = cluster.controller.id if cluster.controller is not None else None
    brokers = sorted(({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
                      for n in cluster.nodes), key=lambda b: int(b["id"]))
    document = {"cluster_id": cluster.cluster_id, "controller": controller,
                "brokers": brokers}
    return View(document, [Table(f"cluster {cluster.cluster_id}, controller {controller}",
                                 ["BROKER", "HOST", "PORT", "RACK"],
                                 [list(b.values()) for b in brokers])])


def _broker_resource(args: argparse.Namespace, **kw: Any) -> Any:
    from confluent_kafka.admin import ConfigResource

    return ConfigResource(ConfigResource.Type.BROKER, str(args.broker), **kw)


def describe_configs(args: argparse.Namespace, options: ClientOptions,
                     client: Any) -> View:
    from confluent_kafka.admin import ConfigSource

    resource = _broker_resource(args)
    entries = result(client.describe_configs([resource], request_timeout=options.timeout_s)
                     [resource], options, "DescribeConfigs")
    shown = [e for _, e in sorted(entries.items())
             if args.all or e.source != ConfigSource.DEFAULT_CONFIG.value]
    rows = [{"name": e.name, "value": None if e.is_sensitive else e.value,
             "source": ConfigSource(e.source).name, "read_only": bool(e.is_read_only),
             "sensitive": bool(e.is_sensitive)} for e in shown]
    return View(rows, [Table(None, ["NAME", "VALUE", "SOURCE", "READ ONLY", "SENSITIVE"],
                             [list(r.values()) for r in rows])])


def alter_configs(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    sets = alter(args, options, client,
                 lambda entries: _broker_resource(args, incremental_configs=entries),
                 "altering broker configs")
    return View({"broker": args.broker, "set": sets, "deleted": list(args.delete)},
                lines=[f"broker {args.broker}: configs altered"])


def add_parsers(sub: Any, common: argparse.ArgumentParser,
                config_commands: Any) -> None:
    cluster = sub.add_parser("cluster", help="the cluster: brokers, controller, id")
    commands = cluster.add_subparsers(dest="cluster_command", required=True)
    p = commands.add_parser("describe", parents=[common],
                            help="brokers, controller, cluster id")
    p.set_defaults(admin=describe_cluster)
    leader_election.add_parser(commands, common)

    for name, func, text in (("describe", describe_configs, "a broker's configs"),
                             ("alter", alter_configs, "set or delete a broker's configs")):
        p = config_commands.add_parser(name, parents=[common], help=text)
        p.add_argument("--broker", type=int, metavar="ID", required=True)
        if name == "describe":
            p.add_argument("--all", action="store_true",
                           help="every config, defaults included")
        else:
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
            p.add_argument("--delete", action="append", default=[], metavar="KEY")
        p.set_defaults(admin=func)
