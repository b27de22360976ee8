"""Running ``kafkernel`` admin commands in tests: in-process through ``kernel.cli.main``
(its exit code, stdout and stderr), and the workload they are run against."""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kernel.cli import main


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


def kafkernel(bootstrap: str, *argv: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--bootstrap-server", bootstrap])
    return Ran(code, out.getvalue(), err.getvalue())


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=p,
                             timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(15) == 0


def member_with_commits(bootstrap: str, group: str, topic: str,
                        committed: dict[int, int]) -> Consumer:
    """A group member, assigned the topic's partitions, that committed these offsets;
    still in the group (the caller closes it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{group}: no assignment within 30 s"
        consumer.poll(0.2)
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
                    asynchronous=False)
    return consumer
