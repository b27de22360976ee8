"""``kafkernel topic``: create, list, describe, alter-config, add-partitions, delete."""

from __future__ import annotations

import argparse
from typing import Any

from admin.client import ClientOptions, metadata, result
from admin.configs import alter, key_values
from admin.log_dirs import partition_sizes
from admin.offsets import list_offsets
from admin.output import Table, View


def create(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import NewTopic

    configs = key_values(args.config, "--config")
    topic = NewTopic(args.topic, num_partitions=args.partitions,
                     replication_factor=args.replication_factor, config=configs)
    futures = client.create_topics([topic], request_timeout=options.timeout_s,
                                   validate_only=args.validate_only)
    result(futures[args.topic], options, f"creating {args.topic}")
    verb = "would be created" if args.validate_only else "created"
    return View({"topic": args.topic, "created": not args.validate_only},
                lines=[f"topic {args.topic} {verb}"])


def _describe_topics(client: Any, options: ClientOptions, names: list[str]) -> list[Any]:
    from confluent_kafka import TopicCollection

    futures = client.describe_topics(TopicCollection(names),
                                     request_timeout=options.timeout_s)
    return [result(futures[name], options, f"describing {name}") for name in names]


def list_(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    names = sorted(metadata(client, options).topics)
    described = _describe_topics(client, options, names) if names else []
    rows = [{"topic": d.name, "partitions": len(d.partitions),
             "replication_factor": len(d.partitions[0].replicas) if d.partitions else 0,
             "internal": bool(d.is_internal)}
            for d in described if args.internal or not d.is_internal]
    return View(rows, [Table(None, ["TOPIC", "PARTITIONS", "REPLICATION", "INTERNAL"],
                             [list(r.values()) for r in rows])])


def _non_default_configs(client: Any, options: ClientOptions, name: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ConfigSource

    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = result(client.describe_configs([resource], request_timeout=options.timeout_s)
                     [resource], options, f"DescribeConfigs of {name}")
    return {k: e.value for k, e in sorted(entries.items())
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def describe(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    described = _describe_topics(client, options, args.topics)
    keys = [(d.name, p.id) for d in described for p in d.partitions]
    earliest = list_offsets(client, options, keys, "earliest")
    latest = list_offsets(client, options, keys, "latest")
    sizes, sizes_error = partition_sizes(options, args.topics)
    document, tables = [], []
    for d in described:
        partitions = []
        for p in sorted(d.partitions, key=lambda p: p.id):
            leader = p.leader.id if p.leader is not None else None
            partitions.append({
                "partition": p.id, "leader": leader,
                "replicas": [r.id for r in p.replicas], "isr": [r.id for r in p.isr],
                "start_offset": earliest[(d.name, p.id)],
                "end_offset": latest[(d.name, p.id)],
                "size_bytes": sizes.get((leader, d.name, p.id)) if leader is not None else None,
            })
        topic = {"topic": d.name, "topic_id": str(d.topic_id), "internal": bool(d.is_internal),
                 "partitions": partitions,
                 "configs": _non_default_configs(client, options, d.name)}
        document.append(topic)
        configs = ",".join(f"{k}={v}" for k, v in topic["configs"].items()) or "-"
        tables.append(Table(f"{d.name}  (id {d.topic_id}; configs: {configs})",
                            ["PARTITION", "LEADER", "REPLICAS", "ISR", "START", "END",
                             "SIZE"],
                            [list(p.values()) for p in partitions]))
    lines = [f"sizes unavailable: {sizes_error}"] if sizes_error else []
    return View(document, tables, lines)


def alter_config(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import ConfigResource

    sets = alter(args, options, client, lambda entries: ConfigResource(
        ConfigResource.Type.TOPIC, args.topic, incremental_configs=entries),
        f"altering {args.topic}'s configs")
    return View({"topic": args.topic, "set": sets, "deleted": list(args.delete)},
                lines=[f"topic {args.topic}: configs altered"])


def add_partitions(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka.admin import NewPartitions

    futures = client.create_partitions([NewPartitions(args.topic, args.total)],
                                       request_timeout=options.timeout_s)
    result(futures[args.topic], options, f"adding partitions to {args.topic}")
    return View({"topic": args.topic, "partitions": args.total},
                lines=[f"topic {args.topic} now has {args.total} partitions"])


def delete(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    futures = client.delete_topics(list(args.topics), request_timeout=options.timeout_s)
    for name in args.topics:
        result(futures[name], options, f"deleting {name}")
    return View({"deleted": list(args.topics)},
                lines=[f"topic {name} deleted" for name in args.topics])


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    topic = sub.add_parser("topic", help="topics: create, list, describe, alter, delete")
    commands = topic.add_subparsers(dest="topic_command", required=True)

    p = commands.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=-1,
                   help="default: the broker's num.partitions")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="default: the broker's default.replication.factor")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--validate-only", action="store_true",
                   help="ask the broker whether it would create it")
    p.set_defaults(admin=create)

    p = commands.add_parser("list", parents=[common], help="list topics")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p.set_defaults(admin=list_)

    p = commands.add_parser("describe", parents=[common],
                            help="partitions, leaders, ISR, offsets, sizes, configs")
    p.add_argument("topics", nargs="+", metavar="topic")
    p.set_defaults(admin=describe)

    p = commands.add_parser("alter-config", parents=[common], help="set or delete configs")
    p.add_argument("topic")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete", action="append", default=[], metavar="KEY")
    p.set_defaults(admin=alter_config)

    p = commands.add_parser("add-partitions", parents=[common],
                            help="raise a topic's partition count")
    p.add_argument("topic")
    p.add_argument("--total", type=int, required=True, help="the new partition count")
    p.set_defaults(admin=add_partitions)

    p = commands.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("topics", nargs="+", metavar="topic")
    p.set_defaults(admin=delete)
