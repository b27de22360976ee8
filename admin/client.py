"""Connecting to a broker: the options every admin command takes, as Kafka's tools
(``--bootstrap-server``, ``--command-config``) with librdkafka's property names, and
waiting for an answer with one-line errors."""

from __future__ import annotations

import argparse
import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admin.errors import AdminError

# The convenience flags and the librdkafka properties they set.
SECURITY_FLAGS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_username": "sasl.username",
    "sasl_password": "sasl.password",
    "ssl_ca_location": "ssl.ca.location",
}


@dataclass(frozen=True)
class ClientOptions:
    bootstrap: str
    timeout_s: float
    properties: Mapping[str, str] = field(default_factory=dict)


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                       help="a broker to bootstrap from, as Kafka's tools take it")
    group.add_argument("--command-config", metavar="FILE",
                       help="a properties file of client settings (librdkafka names)")
    group.add_argument("-X", dest="properties", action="append", default=[],
                       metavar="KEY=VALUE", help="a client setting (librdkafka name)")
    group.add_argument("--security-protocol",
                       choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
    group.add_argument("--sasl-mechanism",
                       choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
    group.add_argument("--sasl-username")
    group.add_argument("--sasl-password")
    group.add_argument("--ssl-ca-location", metavar="FILE", help="CA certificate (PEM)")
    group.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="how long to wait for the broker (default 10)")
    parser.add_argument("--output", "-o", choices=["table", "json"], default="table")


def parse_properties(lines: list[str], source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise AdminError(f"{source}: expected KEY=VALUE, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def client_options(args: argparse.Namespace) -> ClientOptions:
    properties: dict[str, str] = {}
    if args.command_config:
        path = Path(args.command_config)
        try:
            text = path.read_text()
        except OSError as e:
            raise AdminError(f"--command-config {path}: {e.strerror}") from None
        properties.update(parse_properties(text.splitlines(), str(path)))
    properties.update(parse_properties(args.properties, "-X"))
    for flag, key in SECURITY_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            properties[key] = value
    return ClientOptions(args.bootstrap_server, args.timeout, properties)


def confluent_config(options: ClientOptions) -> dict[str, Any]:
    return {"bootstrap.servers": options.bootstrap,
            "socket.timeout.ms": int(options.timeout_s * 1000),
            # librdkafka logs each failed connection attempt; the command says it once
            "log_level": 0, **options.properties}


def admin_client(options: ClientOptions) -> Any:
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient(confluent_config(options))
    except Exception as e:  # KafkaException: an unknown or invalid property
        raise AdminError(f"client settings: {first_line(e)}") from None


MAX_MESSAGE = 300


def first_line(error: BaseException) -> str:
    """A client error as one line: a KafkaError's own string, else the exception's, cut
    at MAX_MESSAGE characters (Kafka's message for a request its controller refused is
    a dump of the forwarded request)."""
    arg = error.args[0] if error.args else error
    text = (arg.str() if hasattr(arg, "str") else str(arg)).strip()
    if not text:
        return type(error).__name__
    line = text.splitlines()[0]
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE] + "..."


def result(future: Any, options: ClientOptions, what: str) -> Any:
    """A future's result, or an AdminError naming ``what`` and why."""
    try:
        return future.result(timeout=options.timeout_s)
    except concurrent.futures.TimeoutError:
        raise AdminError(f"{what}: no answer from {options.bootstrap} within "
                         f"{options.timeout_s:g} s") from None
    except Exception as e:  # KafkaException and its kin
        raise AdminError(f"{what}: {first_line(e)}") from None


def metadata(client: Any, options: ClientOptions, topic: str | None = None) -> Any:
    """Metadata through an admin client or a consumer (every topic, or ``topic``), or an
    AdminError naming the broker."""
    try:
        return client.list_topics(topic, timeout=options.timeout_s)
    except Exception as e:  # KafkaException: the broker out of reach
        raise AdminError(f"Metadata from {options.bootstrap}: {first_line(e)}") from None
