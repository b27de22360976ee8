"""``kafkernel storage format|random-uuid|info``, as Kafka 4.3.1's ``kafka-storage``.

``format`` writes ``meta.properties`` (version 1, cluster.id, node.id, a directory.id)
and ``bootstrap.checkpoint`` (the finalized features, metadata.version first, and
``--add-scram`` credentials, in snapshot format: Kafka's ``BootstrapDirectory``) into
every log dir and the metadata log dir. A dynamic quorum's metadata dir (``--standalone``,
``--initial-controllers``; not ``--no-initial-controllers``) also gets the 0-0 snapshot with
``KRaftVersionRecord`` 1 and the initial ``VotersRecord``. A node's first start reads
``bootstrap.checkpoint`` when present; a node never formatted formats itself.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import re
import secrets
import string
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord

from kernel.api.config import BrokerConfig, controller_listeners, parse_voters

from .log import METADATA_PARTITION_DIR, MetadataLogError, versioned
from .properties import (
    META_PROPERTIES,
    new_cluster_id,
    parse_uuid,
    read_meta_properties,
    write_meta_properties,
)
from .records.schema import FeatureLevelRecord, Message, UserScramCredentialRecord
from .snapshots import BOOTSTRAP_SNAPSHOT, read_snapshot, write_snapshot

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
METADATA_VERSION = "metadata.version"
# MetadataVersion names -> feature levels, 3.3-IV3 (the lowest a cluster is formatted
# at) to 4.3-IV0 (Kafka 4.3.1's latest), as its `kafka-storage format` lists them.
METADATA_VERSIONS = dict(zip(
    ["3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2",
     "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0", "4.0-IV0",
     "4.0-IV1", "4.0-IV2", "4.0-IV3", "4.1-IV0", "4.1-IV1", "4.2-IV0", "4.2-IV1", "4.3-IV0"],
    range(7, 31), strict=True))
# The other features a release finalizes by default (`kafka-features version-mapping
# --release-version X` of 4.3.1); a version between releases takes its release's.
# kraft.version is not among them: it is the 0-0 snapshot's KRaftVersionRecord.
_RELEASE_FEATURES: dict[str, dict[str, int]] = {
    "3.9": {}, "4.0": {"group.version": 1, "transaction.version": 2},
    "4.1": {"eligible.leader.replicas.version": 1, "group.version": 1,
            "transaction.version": 2},
    "4.2": {"eligible.leader.replicas.version": 1, "group.version": 1, "share.version": 1,
            "streams.version": 1, "transaction.version": 2},
}
_RELEASE_FEATURES["4.3"] = _RELEASE_FEATURES["4.2"]
FEATURES = ("eligible.leader.replicas.version", "group.version", "kraft.version",
            "share.version", "streams.version", "transaction.version")
LATEST = "4.3-IV0"
# ScramMechanism: type, hash, and the iterations Kafka allows
_SCRAM = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
_SCRAM_ITERATIONS = (4096, 16384)
_ADD_SCRAM = re.compile(r"^(SCRAM-SHA-\d+)=\[(.*)\]$")


class FormatError(Exception):
    """A format the tool refuses, in Kafka's words."""


def release_version(text: str) -> str:
    """The MetadataVersion name of ``--release-version`` (``4.0`` is its latest IV)."""
    if text in METADATA_VERSIONS:
        return text
    candidates = [name for name in METADATA_VERSIONS if name.split("-")[0] == text]
    if not candidates:
        raise FormatError(f"Unknown metadata.version '{text}'. Supported metadata.version "
                          f"are: {', '.join(METADATA_VERSIONS)}")
    return candidates[-1]


def bootstrap_features(version: str, overrides: dict[str, int]) -> list[FeatureLevelRecord]:
    """metadata.version first, then the other features by name; level 0 left out."""
    release = version.split("-")[0]
    levels = dict(_RELEASE_FEATURES.get(release, {}))
    for name, level in overrides.items():
        if name == METADATA_VERSION:
            raise FormatError("Please use --release-version instead of --feature "
                              "metadata.version")
        if name not in FEATURES:
            raise FormatError(f"Unsupported feature: {name}. Supported features are: "
                              f"{', '.join(FEATURES)}")
        levels[name] = level
    levels.pop("kraft.version", None)
    return [FeatureLevelRecord(name=METADATA_VERSION, feature_level=METADATA_VERSIONS[version]),
            *(FeatureLevelRecord(name=n, feature_level=v)
              for n, v in sorted(levels.items()) if v > 0)]


def scram_record(text: str) -> UserScramCredentialRecord:
    """``--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` (or salt=,
    saltedpassword=, iterations=), as Kafka's ScramParser."""
    match = _ADD_SCRAM.match(text.strip())
    if match is None or match[1] not in _SCRAM:
        raise FormatError(f"Invalid --add-scram {text!r}: expected SCRAM-SHA-256=[name=..,"
                          "password=..] or SCRAM-SHA-512=[...]")
    mechanism, hash_name = _SCRAM[match[1]]
    fields = {}
    for part in match[2].split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise FormatError(f"Invalid --add-scram {text!r}: {part!r} is not key=value")
        fields[key.strip()] = value.strip().strip('"')
    if "name" not in fields:
        raise FormatError(f"Invalid --add-scram {text!r}: you must supply 'name'")
    iterations = int(fields.get("iterations", _SCRAM_ITERATIONS[0]))
    if not _SCRAM_ITERATIONS[0] <= iterations <= _SCRAM_ITERATIONS[1]:
        raise FormatError(f"Invalid --add-scram {text!r}: iterations must be in "
                          f"[{_SCRAM_ITERATIONS[0]}, {_SCRAM_ITERATIONS[1]}]")
    salt = (base64.b64decode(fields["salt"]) if "salt" in fields else
            "".join(secrets.choice(string.ascii_lowercase + string.digits)
                    for _ in range(25)).encode())
    if "saltedpassword" in fields:
        salted = base64.b64decode(fields["saltedpassword"])
    elif "password" in fields:
        salted = hashlib.pbkdf2_hmac(hash_name, fields["password"].encode(), salt, iterations)
    else:
        raise FormatError(f"Invalid --add-scram {text!r}: you must supply 'password' or "
                          "'saltedpassword'")
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return UserScramCredentialRecord(
        name=fields["name"], mechanism=mechanism, salt=salt,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", hash_name).digest(), iterations=iterations)


def read_bootstrap_records(metadata_log_dir: Path) -> list[Message] | None:
    """The records of ``<metadata.log.dir>/bootstrap.checkpoint``; None without one."""
    path = Path(metadata_log_dir) / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        return None
    return [r.message for r in read_snapshot(path).records]


@dataclass(frozen=True, slots=True)
class FormatRequest:
    cluster_id: str
    release_version: str = LATEST
    features: dict[str, int] | None = None
    scram: Sequence[str] = ()
    standalone: bool = False
    initial_controllers: str | None = None
    no_initial_controllers: bool = False
    ignore_formatted: bool = False


def _voters(config: BrokerConfig, request: FormatRequest, metadata_dir_id: uuid.UUID
            ) -> tuple[VotersRecord | None, uuid.UUID]:
    """The initial voters of a dynamic quorum, and the metadata dir's directory.id."""
    feature = KRaftVersionFeature(min_supported_version=0, max_supported_version=1)
    if request.standalone:
        names = controller_listeners(config)
        endpoints = []
        for item in config.listeners:
            name, _, address = item.partition("://")
            host, _, port = address.rpartition(":")
            if name.strip().upper() in names:
                endpoints.append(Endpoint(name=name.strip().upper(), host=host.strip("[]"),
                                          port=int(port)))
        if not endpoints:
            raise FormatError("--standalone needs a controller listener in listeners")
        return VotersRecord(version=0, voters=(Voter(
            voter_id=config.node_id, voter_directory_id=metadata_dir_id,
            endpoints=tuple(endpoints[:1]), k_raft_version_feature=feature),)), metadata_dir_id
    if request.initial_controllers is None:
        return None, metadata_dir_id
    listener = config.controller_listener_names[0].strip().upper() \
        if config.controller_listener_names else "CONTROLLER"
    voters = []
    own = metadata_dir_id
    for item in request.initial_controllers.split(","):
        match = re.match(r"^(\d+)@\[?([^\]]+?)\]?:(\d+):([A-Za-z0-9_-]{22})$", item.strip())
        if match is None:
            raise FormatError(f"Invalid --initial-controllers entry {item!r}: expected "
                              "id@host:port:directory-id")
        dir_id = parse_uuid(match[4])
        if int(match[1]) == config.node_id:
            own = dir_id
        voters.append(Voter(voter_id=int(match[1]), voter_directory_id=dir_id,
                            endpoints=(Endpoint(name=listener, host=match[2],
                                                port=int(match[3])),),
                            k_raft_version_feature=feature))
    return VotersRecord(version=0, voters=tuple(voters)), own


def format_storage(config: BrokerConfig, request: FormatRequest,
                   out: Callable[[str], None] = print) -> int:
    """Format every log dir and the metadata log dir; 0, or raises FormatError."""
    dynamic = request.standalone or request.initial_controllers is not None \
        or request.no_initial_controllers
    if sum((request.standalone, request.initial_controllers is not None,
            request.no_initial_controllers)) > 1:
        raise FormatError("Only one of --standalone, --initial-controllers, or "
                          "--no-initial-controllers can be specified.")
    controller = not config.process_roles or "controller" in config.process_roles
    if config.controller_quorum_voters and (request.standalone
                                            or request.initial_controllers is not None):
        raise FormatError(
            "You cannot specify controller.quorum.voters and format the node with "
            "--initial-controllers or --standalone. If you want to use dynamic quorum, "
            "please remove controller.quorum.voters and specify "
            "controller.quorum.bootstrap.servers instead.")
    if controller and not config.controller_quorum_voters and not dynamic \
            and config.controller_quorum_bootstrap_servers:
        raise FormatError(
            "Because controller.quorum.voters is not set on this controller, you must "
            "specify one of the following: --standalone, --initial-controllers, or "
            "--no-initial-controllers.")
    try:
        parse_voters(config.controller_quorum_voters)
    except ValueError as e:
        raise FormatError(f"controller.quorum.voters: {e}") from None
    version = release_version(request.release_version)
    records: list[Message] = [*bootstrap_features(version, request.features or {}),
                              *(scram_record(s) for s in request.scram)]
    metadata_dir = Path(config.metadata_log_dir or config.log_dirs[0])
    dirs = list(dict.fromkeys([*(Path(d) for d in config.log_dirs), metadata_dir]))
    todo = []
    for directory in dirs:
        if read_meta_properties(directory) is not None:
            if not request.ignore_formatted:
                raise FormatError(f"Log directory {directory} is already formatted. Use "
                                  "--ignore-formatted to ignore this directory and format "
                                  "the others.")
        else:
            todo.append(directory)
    if not todo:
        out("All of the log directories are already formatted.")
        return 0
    voters, metadata_dir_id = _voters(config, request, uuid.uuid4())
    now = int(time.time() * 1000)
    for directory in todo:
        directory.mkdir(parents=True, exist_ok=True)
        is_metadata = directory == metadata_dir
        if is_metadata and dynamic and controller:
            out(f"Formatting dynamic metadata voter directory {directory} with "
                f"metadata.version {version}.")
        else:
            kind = "metadata" if is_metadata else "data"
            out(f"Formatting {kind} directory {directory} with metadata.version {version}.")
        write_snapshot(directory, BOOTSTRAP_SNAPSHOT, [versioned(r) for r in records],
                       last_contained_log_timestamp=0, append_time_ms=now,
                       name=BOOTSTRAP_CHECKPOINT)
        if is_metadata and dynamic and controller and voters is not None:
            partition = directory / METADATA_PARTITION_DIR
            partition.mkdir(exist_ok=True)
            write_snapshot(partition, BOOTSTRAP_SNAPSHOT, [],
                           last_contained_log_timestamp=now, voters=voters, kraft_version=1)
        dir_id = metadata_dir_id if is_metadata else uuid.uuid4()
        write_meta_properties(directory, request.cluster_id, config.node_id, dir_id)
    return 0


def storage_info(config: BrokerConfig, out: Callable[[str], None] = print) -> int:
    dirs = list(dict.fromkeys([*config.log_dirs, config.metadata_log_dir or config.log_dirs[0]]))
    out("Found log directories:")
    found = None
    for d in sorted(dirs):
        out(f"  {d}")
        props = read_meta_properties(Path(d))
        if props is not None and found is None:
            found = props
    out("")
    if found is None:
        out(f"Found problems:\n\n  No {META_PROPERTIES} found in any log directory.")
        return 1
    out("Found metadata: {" + ", ".join(f"{k}={v}" for k, v in sorted(found.items())) + "}")
    return 0


def add_parsers(sub: Any, load_config: Callable[[str | None, list[str]], BrokerConfig]) -> None:
    """``kafkernel storage format|random-uuid|info``."""
    storage = sub.add_parser("storage", help="format log directories (as kafka-storage)")
    storage_sub = storage.add_subparsers(dest="storage_command", required=True)

    def config_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", "-c", help="TOML config file (the broker's)")
        p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")

    fmt = storage_sub.add_parser("format", help="format the log directories of a node")
    config_args(fmt)
    fmt.add_argument("--cluster-id", "-t", required=True)
    fmt.add_argument("--release-version", "-r", default=LATEST)
    fmt.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL")
    fmt.add_argument("--add-scram", "-S", action="append", default=[])
    fmt.add_argument("--ignore-formatted", "-g", action="store_true")
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true")
    quorum.add_argument("--initial-controllers", "-I")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true")

    def run_format(args: argparse.Namespace) -> int:
        config = load_config(args.config, args.override)
        try:
            parse_uuid(args.cluster_id)
            features = {}
            for item in args.feature:
                name, sep, level = item.partition("=")
                if not sep or not level.strip().lstrip("-").isdigit():
                    raise FormatError(f"Can't parse feature={item!r}. The format must be "
                                      "feature=level")
                features[name.strip()] = int(level)
            return format_storage(config, FormatRequest(
                cluster_id=args.cluster_id, release_version=args.release_version,
                features=features, scram=args.add_scram, standalone=args.standalone,
                initial_controllers=args.initial_controllers,
                no_initial_controllers=args.no_initial_controllers,
                ignore_formatted=args.ignore_formatted))
        except (FormatError, MetadataLogError, OSError) as e:
            print(e, file=sys.stderr)
            return 1
        except ValueError:
            print(f"Cluster ID string {args.cluster_id} does not appear to be a valid UUID",
                  file=sys.stderr)
            return 1

    fmt.set_defaults(func=run_format)
    rnd = storage_sub.add_parser("random-uuid", help="print a random cluster id")
    rnd.set_defaults(func=lambda _a: print(new_cluster_id()) or 0)
    info = storage_sub.add_parser("info", help="show the log directories' meta.properties")
    config_args(info)
    info.set_defaults(func=lambda a: storage_info(load_config(a.config, a.override)))

