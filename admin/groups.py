"""``kafkernel group``: list, describe (members, assignments, committed offsets, lag),
reset-offsets (dry run unless --execute, as kafka-consumer-groups), delete."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from admin.client import ClientOptions, metadata, result
from admin.errors import AdminError
from admin.offsets import TopicPartitionKey, list_offsets
from admin.output import Table, View


def state_name(state: Any) -> str:
    """librdkafka's STABLE as Kafka's tools print it: Stable."""
    name = getattr(state, "name", str(state))
    return "".join(word.capitalize() for word in name.split("_"))


def list_(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    listed = result(client.list_consumer_groups(request_timeout=options.timeout_s),
                    options, "ListGroups")
    rows = sorted(({"group": g.group_id, "state": state_name(g.state),
                    "simple": bool(g.is_simple_consumer_group)} for g in listed.valid),
                  key=lambda r: str(r["group"]))
    lines = [f"error: {e}" for e in listed.errors]
    return View(rows, [Table(None, ["GROUP", "STATE", "SIMPLE"],
                             [list(r.values()) for r in rows])], lines)


def committed_offsets(client: Any, options: ClientOptions,
                      group: str) -> dict[TopicPartitionKey, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                 request_timeout=options.timeout_s)
    answer = result(futures[group], options, f"OffsetFetch of {group}")
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions
            if tp.offset >= 0}


def _description(client: Any, options: ClientOptions, group: str) -> Any:
    futures = client.describe_consumer_groups([group], request_timeout=options.timeout_s)
    return result(futures[group], options, f"describing {group}")


def describe(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    group = args.group
    description = _description(client, options, group)
    committed = committed_offsets(client, options, group)
    owners: dict[TopicPartitionKey, str] = {}
    members = []
    for m in description.members:
        assigned = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        owners.update((tp, m.member_id) for tp in assigned)
        members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                        "assignment": [f"{t}-{p}" for t, p in assigned]})
    partitions = sorted(set(committed) | set(owners))
    end = list_offsets(client, options, partitions, "latest")
    offsets = []
    for tp in partitions:
        current = committed.get(tp)
        offsets.append({"topic": tp[0], "partition": tp[1], "committed": current,
                        "end_offset": end[tp],
                        "lag": end[tp] - current if current is not None else None,
                        "member_id": owners.get(tp)})
    total = sum(o["lag"] for o in offsets if o["lag"] is not None)
    coordinator = description.coordinator
    document = {"group": group, "state": state_name(description.state),
                "protocol": description.partition_assignor or None,
                "coordinator": coordinator.id if coordinator is not None else None,
                "members": members, "offsets": offsets, "total_lag": total}
    tables = [
        Table(f"group {group}: {document['state']}, coordinator {document['coordinator']}, "
              f"total lag {total}",
              ["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER"],
              [list(o.values()) for o in offsets]),
        Table("members", ["MEMBER", "CLIENT", "HOST", "ASSIGNMENT"],
              [list(m.values()) for m in members]),
    ]
    return View(document, tables)


def _partitions_to_reset(client: Any, options: ClientOptions, args: argparse.Namespace,
                         committed: dict[TopicPartitionKey, int]) -> list[TopicPartitionKey]:
    if args.all_topics:
        return sorted(committed)
    wanted: list[TopicPartitionKey] = []
    topics = metadata(client, options).topics
    for item in args.topic:
        name, _, chosen = item.partition(":")
        topic = topics.get(name)
        if topic is None or topic.error is not None:
            raise AdminError(f"--topic {name}: no such topic")
        partitions = sorted(topic.partitions)
        if chosen:
            try:
                picked = [int(p) for p in chosen.split(",")]
            except ValueError:
                raise AdminError(f"--topic {item}: expected TOPIC[:P,P...]") from None
            missing = [p for p in picked if p not in topic.partitions]
            if missing:
                raise AdminError(f"--topic {item}: {name} has no partition {missing[0]}")
            partitions = picked
        wanted += [(name, p) for p in partitions]
    if not wanted:
        raise AdminError("choose partitions: --topic TOPIC[:P,...] or --all-topics")
    return wanted


def _target_offsets(client: Any, options: ClientOptions, args: argparse.Namespace,
                    partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    earliest = list_offsets(client, options, partitions, "earliest")
    latest = list_offsets(client, options, partitions, "latest")
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_datetime is not None:
        try:
            moment = datetime.datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise AdminError(f"--to-datetime {args.to_datetime!r}: not an ISO 8601 time "
                             "(e.g. 2026-11-26T09:00:00+00:00)") from None
        if moment.tzinfo is None:
            moment = moment.astimezone()  # local time, as Kafka's tool reads it
        found = list_offsets(client, options, partitions, int(moment.timestamp() * 1000))
        # no record at or after the time: the end, as kafka-consumer-groups does
        return {tp: latest[tp] if off < 0 else off for tp, off in found.items()}
    # --to-offset: kept within the log, as kafka-consumer-groups does
    return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}


def reset_offsets(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    group = args.group
    state = state_name(_description(client, options, group).state)
    if state not in ("Empty", "Dead"):  # as kafka-consumer-groups refuses it
        raise AdminError(f"assignments can only be reset if the group '{group}' is "
                         f"inactive, but the current state is {state}")
    committed = committed_offsets(client, options, group)
    partitions = _partitions_to_reset(client, options, args, committed)
    target = _target_offsets(client, options, args, partitions)
    if args.execute:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, target[(t, p)]) for t, p in partitions])
        futures = client.alter_consumer_group_offsets([request],
                                                      request_timeout=options.timeout_s)
        answer = result(futures[group], options, f"resetting {group}'s offsets")
        failed = [tp for tp in answer.topic_partitions if tp.error is not None]
        if failed:
            tp = failed[0]
            raise AdminError(f"resetting {group}'s offsets: {tp.topic}-{tp.partition}: "
                             f"{tp.error.str()}")
    rows = [{"topic": t, "partition": p, "committed": committed.get((t, p)),
             "new_offset": target[(t, p)]} for t, p in partitions]
    said = ("offsets reset" if args.execute
            else "dry run: nothing changed (--execute to reset)")
    return View({"group": group, "executed": bool(args.execute), "offsets": rows},
                [Table(f"group {group}", ["TOPIC", "PARTITION", "COMMITTED", "NEW OFFSET"],
                       [list(r.values()) for r in rows])], [said])


def delete(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    futures = client.delete_consumer_groups(list(args.groups),
                                            request_timeout=options.timeout_s)
    for group in args.groups:
        result(futures[group], options, f"deleting {group}")
    return View({"deleted": list(args.groups)},
                lines=[f"group {group} deleted" for group in args.groups])


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("group", help="consumer groups: list, describe, reset, delete")
    commands = group.add_subparsers(dest="group_command", required=True)

    p = commands.add_parser("list", parents=[common], help="list consumer groups")
    p.set_defaults(admin=list_)

    p = commands.add_parser("describe", parents=[common],
                            help="members, assignments, committed offsets and lag")
    p.add_argument("group")
    p.set_defaults(admin=describe)

    p = commands.add_parser("reset-offsets", parents=[common],
                            help="move a group's committed offsets (a dry run unless "
                                 "--execute)")
    p.add_argument("group")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]")
    which.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="ISO-8601",
                    help="the first offset at or after this time")
    to.add_argument("--to-offset", type=int)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="reset the offsets")
    p.set_defaults(admin=reset_offsets)

    p = commands.add_parser("delete", parents=[common], help="delete consumer groups")
    p.add_argument("groups", nargs="+", metavar="group")
    p.set_defaults(admin=delete)
