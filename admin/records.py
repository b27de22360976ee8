"""``kafkernel produce`` and ``kafkernel consume``: quick checks from a terminal, as
kcat and Kafka's console tools. produce sends stdin's lines (a key before
--key-separator, headers for every record); consume prints records through a format
string (kcat's %-codes) from the end or the beginning, up to a count or to the end."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from admin.client import ClientOptions, confluent_config, first_line, metadata
from admin.configs import key_values
from admin.errors import AdminError
from admin.output import View

DEFAULT_FORMAT = "%v\\n"  # kcat prints a format as given: its newline is in it


def produce(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka import KafkaException, Producer

    headers = list(key_values(args.header, "--header").items())
    producer = Producer({**confluent_config(options), "acks": args.acks,
                         "message.timeout.ms": int(options.timeout_s * 1000)})
    failures: list[str] = []
    delivered: dict[int, int] = {}

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err.str())
        else:
            delivered[msg.partition()] = delivered.get(msg.partition(), 0) + 1

    kw: dict[str, Any] = {"headers": headers} if headers else {}
    if args.partition is not None:
        kw["partition"] = args.partition
    def send(value: str, key: str | None) -> None:
        while True:
            try:
                producer.produce(args.topic, value=value.encode(),
                                 key=None if key is None else key.encode(),
                                 on_delivery=report, **kw)
                return
            except KafkaException as e:
                raise AdminError(f"producing to {args.topic}: {first_line(e)}") from None
            except BufferError:  # the client's queue is full: wait for room, then again
                producer.poll(1.0)

    for number, line in enumerate(args.input or sys.stdin, 1):
        value = line.rstrip("\n")
        key = None
        if args.key_separator:
            key, sep, rest = value.partition(args.key_separator)
            if not sep:
                # what came before is sent, and said, before the command ends
                sent = producer.flush(options.timeout_s) == 0 and not failures
                raise AdminError(
                    f"line {number} has no key separator {args.key_separator!r}: "
                    f"{value[:60]!r}; the {number - 1} lines before it were "
                    f"{'produced' if sent else 'not all produced'}")
            value = rest
        send(value, key)
        producer.poll(0)
    left = producer.flush(options.timeout_s)
    if failures or left:
        reason = failures[0] if failures else f"{left} records not acknowledged in time"
        raise AdminError(f"producing to {args.topic}: {reason}")
    total = sum(delivered.values())
    return View({"topic": args.topic, "records": total,
                 "partitions": {str(p): n for p, n in sorted(delivered.items())}},
                lines=[f"{total} records produced to {args.topic}"])


def render(fmt: str, msg: Any) -> str:
    """kcat's format codes: %t topic, %p partition, %o offset, %k key, %v value,
    %h headers (k=v,...), %T timestamp (ms), %% a percent sign; \\n and \\t."""
    key, value = msg.key(), msg.value()
    headers = ",".join(f"{k}={(v or b'').decode(errors='replace')}"
                       for k, v in (msg.headers() or []))
    codes = {"t": msg.topic(), "p": str(msg.partition()), "o": str(msg.offset()),
             "k": key.decode(errors="replace") if key is not None else "",
             "v": value.decode(errors="replace") if value is not None else "",
             "h": headers, "T": str(msg.timestamp()[1]), "%": "%"}
    out, i = [], 0
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt) and fmt[i + 1] in codes:
            out.append(codes[fmt[i + 1]])
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def consume(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaError,
        TopicPartition,
    )

    config = {**confluent_config(options), "enable.partition.eof": True,
              "group.id": args.group or "kafkernel-consume",
              "enable.auto.commit": bool(args.group),
              "auto.offset.reset": "earliest" if args.from_beginning else "latest"}
    consumer = Consumer(config)
    records: list[dict[str, Any]] = []
    try:
        topic = metadata(consumer, options, args.topic).topics.get(args.topic)
        if topic is None or topic.error is not None:
            reason = topic.error.str() if topic is not None and topic.error else "not found"
            raise AdminError(f"consuming {args.topic}: {reason}")
        partitions = sorted(topic.partitions)
        if args.group:
            consumer.subscribe([args.topic])
        else:
            start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        at_end: set[int] = set()
        idle_since = time.monotonic()
        while args.count is None or len(records) < args.count:
            try:
                msg = consumer.poll(0.2)
            except KeyboardInterrupt:  # Ctrl-C: the records so far are the answer
                break
            if msg is None:
                if args.idle_timeout and time.monotonic() - idle_since > args.idle_timeout:
                    break
                continue
            idle_since = time.monotonic()
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    if args.exit_at_end and at_end >= set(partitions):
                        break
                    continue
                raise AdminError(f"consuming {args.topic}: {error.str()}")
            at_end.discard(msg.partition())
            key, value = msg.key(), msg.value()
            records.append({
                "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                "timestamp": msg.timestamp()[1],
                "key": key.decode(errors="replace") if key is not None else None,
                "value": value.decode(errors="replace") if value is not None else None,
                "headers": {k: (v or b"").decode(errors="replace")
                            for k, v in (msg.headers() or [])}})
            if args.output == "json":
                continue
            # as they come, not at the end: a consume without a count runs until Ctrl-C
            sys.stdout.write(render(args.format, msg))
            sys.stdout.flush()
    finally:
        consumer.close()
    return View(records)


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common],
                       help="send stdin's lines to a topic, a record each")
    p.add_argument("topic")
    p.add_argument("--key-separator", metavar="SEP",
                   help="each line is KEY<SEP>VALUE")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="a header of every record (repeatable)")
    p.add_argument("--partition", type=int, help="default: the client's partitioner")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"])
    p.add_argument("--input", type=argparse.FileType("r"), help="read lines from a file")
    p.set_defaults(admin=produce)

    p = sub.add_parser("consume", parents=[common],
                       help="print a topic's records (Ctrl-C to stop)")
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--count", type=int, help="stop after this many records")
    p.add_argument("--exit-at-end", "-e", action="store_true",
                   help="stop at the end of every partition")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                   help="stop after this long without a record")
    p.add_argument("--group", help="consume as this group (commits its offsets)")
    p.add_argument("--format", "-f", default=DEFAULT_FORMAT,
                   help="kcat's codes: %%t %%p %%o %%k %%v %%h %%T, \\n \\t; printed as "
                        "given, as kcat's -f (default %%v\\n)")
    p.set_defaults(admin=consume)
