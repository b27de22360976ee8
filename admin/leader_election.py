"""``kafkernel cluster elect-leaders``: Kafka's kafka-leader-election.sh. One
ElectLeaders request (preferred or unclean) for one partition, the partitions of a JSON
file, or every partition; its answer in the tool's words, so it works with any broker
that serves ElectLeaders, whichever metadata plugin it runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from admin.client import ClientOptions, first_line, result
from admin.errors import AdminError
from admin.output import View, emit
from kernel.api.errors import ErrorCode

# Kafka's exception class names whose name is not the error's in CamelCase.
EXCEPTION_NAMES = {
    "REQUEST_TIMED_OUT": "TimeoutException",
    "INVALID_TOPIC_EXCEPTION": "InvalidTopicException",
    "TOPIC_AUTHORIZATION_FAILED": "TopicAuthorizationException",
    "CLUSTER_AUTHORIZATION_FAILED": "ClusterAuthorizationException",
    "UNKNOWN_SERVER_ERROR": "UnknownServerException",
}


def kafka_error_name(error: Any) -> str:
    """Kafka's name of a client error (librdkafka's can differ: UNKNOWN_TOPIC_OR_PART)."""
    try:
        return ErrorCode(error.code()).name.upper()
    except ValueError:
        return str(error.name())


def java_exception(error: Any) -> str:
    """A partition's error as Kafka's tool prints it: its exception's toString."""
    name = kafka_error_name(error)
    simple = EXCEPTION_NAMES.get(name) or (
        "".join(w.capitalize() for w in name.split("_")) + "Exception")
    message = error.str()
    text = f"org.apache.kafka.common.errors.{simple}"
    return f"{text}: {message}" if message else text


def _json_partitions(path: str) -> list[tuple[str, int]]:
    """The partitions of a --path-to-json-file, checked as Kafka's tool checks them."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as e:
        raise AdminError(f"--path-to-json-file {path}: {e.strerror}") from None
    except ValueError as e:
        raise AdminError(f"--path-to-json-file {path}: not JSON: {e}") from None
    if not document:
        raise AdminError("Replica election data is empty")
    if not isinstance(document, dict) or "partitions" not in document:
        raise AdminError('Replica election data is missing "partitions" field')
    partitions: list[tuple[str, int]] = []
    try:
        for entry in document["partitions"]:
            topic, partition = entry["topic"], entry["partition"]
            if not isinstance(topic, str) or not isinstance(partition, int):
                raise TypeError
            partitions.append((topic, partition))
    except (KeyError, TypeError):
        raise AdminError(f"--path-to-json-file {path}: each partition needs a string "
                         '"topic" and an integer "partition"') from None
    twice = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if twice:
        raise AdminError("Replica election data contains duplicate partitions: "
                         + ",".join(f"{t}-{p}" for t, p in twice))
    return partitions


def _selected(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """The partitions asked for (None: every partition), with the tool's checks."""
    chosen = [args.topic is not None, args.all_topic_partitions,
              args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise AdminError("One and only one of the following options is required: "
                         "topic, all-topic-partitions, path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise AdminError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise AdminError("Option partition is only allowed if topic is used")
    if args.path_to_json_file is not None:
        return _json_partitions(args.path_to_json_file)
    if args.topic is not None:
        return [(args.topic, args.partition)]
    return None


def elect_leaders(args: argparse.Namespace, options: ClientOptions, client: Any) -> View:
    from confluent_kafka import ElectionType, TopicPartition

    selected = _selected(args)
    election = args.election_type.upper()
    partitions = None if selected is None else [TopicPartition(t, p) for t, p in selected]
    if partitions == []:
        return View({"succeeded": [], "noop": [], "failed": {}})
    # confluent-kafka 2.x takes its timeouts only as keywords of its own: the client's
    # socket.timeout.ms (--timeout) bounds the request.
    answer = result(client.elect_leaders(ElectionType[election], partitions), options,
                    "ElectLeaders")
    succeeded, noop, failed = [], [], {}
    for tp, error in sorted(answer.items(), key=lambda item: (item[0].topic,
                                                              item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(error, Exception) and error.args:  # a KafkaException: its error
            error = error.args[0]
        if error is None:
            succeeded.append(name)
        elif hasattr(error, "name") and error.name() == "ELECTION_NOT_NEEDED":
            noop.append(name)
        else:
            failed[name] = error
    lines = []
    if succeeded:
        lines.append(f"Successfully completed leader election ({election}) for partitions "
                     + ", ".join(succeeded))
    if noop:
        lines.append("Valid replica already elected for partitions " + ", ".join(noop))
    for name, error in failed.items():
        text = java_exception(error) if hasattr(error, "name") else first_line(error)
        lines.append(f"Error completing leader election ({election}) for partition: "
                     f"{name}: {text}")
    document = {"succeeded": succeeded, "noop": noop, "failed": {
        name: {"error": kafka_error_name(e) if hasattr(e, "name") else type(e).__name__,
               "message": e.str() if hasattr(e, "str") else str(e)}
        for name, e in failed.items()}}
    view = View(document, lines=lines)
    if failed:
        # Kafka's tool prints its lines, then fails with this message.
        emit(view, args.output)
        raise AdminError(f"{len(failed)} replica(s) could not be elected")
    return view


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "elect-leaders", parents=[common],
        help="elect preferred or unclean leaders (Kafka's kafka-leader-election)")
    p.add_argument("--election-type", required=True, type=str.lower,
                   choices=["preferred", "unclean"],
                   help="preferred: the first replica, where it is in the ISR; unclean: "
                        "any live replica, only where a partition has no leader")
    p.add_argument("--topic", help="the topic of --partition")
    p.add_argument("--partition", type=int, metavar="ID")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="every partition that needs the election")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions": [{"topic": "foo", "partition": 1}, ...]}')
    p.set_defaults(admin=elect_leaders)
