"""Record what Apache Kafka's KRaft quorum writes and answers, for issue 32 to match:

    python -m tests.reference.kraft_facts OUTDIR [--voters dynamic|static] [--brokers 3]

Formats a node each way `kafka-storage format` can (static voters, ``--standalone``,
``--initial-controllers``, ``--no-initial-controllers``) and records the trees; then
starts 3 controllers and the brokers (reference/kraft.py) with snapshots forced early,
creates a topic, a broker config, a topic config, an ACL, SCRAM users and a client quota,
and records into OUTDIR: each node's dir tree (names and sizes), ``meta.properties``,
``quorum-state``, ``kafka-dump-log --cluster-metadata-decoder`` of the metadata log, of
a snapshot and of the bootstrap files, ``kafka-features describe``,
``kafka-metadata-quorum describe --status`` and ``--replication``, the decoded
DescribeQuorum v2 and controller-listener ApiVersions answers, and the KRaft settings'
defaults as a broker and a controller describe them. OUTDIR is regenerated each run;
docs/kraft-reference-facts.md summarises it.
"""

from __future__ import annotations

import argparse
import pprint
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kio.schema.api_versions.v4.request import ApiVersionsRequest

from reference import kraft, tools
from reference.kafka import LOG4J2_PROPERTIES, STORAGE_TOOL_MAIN, _random_cluster_id

# Small enough that each node snapshots within seconds of the writes below.
SNAPSHOT_BYTES = "4096"
SETTINGS = {
    "metadata.log.max.record.bytes.between.snapshots": SNAPSHOT_BYTES,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}
DEFAULTS_OF = ("metadata.", "controller.quorum.", "broker.heartbeat", "broker.session",
               "initial.broker.registration", "process.roles", "eligible.leader",
               "unclean.leader", "auto.leader.rebalance", "leader.imbalance")


def tree(root: Path) -> str:
    """Every file under ``root``: relative path and size, sorted."""
    lines = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            lines.append(f"{path.stat().st_size:>10}  {path.relative_to(root)}")
        elif path.is_dir():
            lines.append(f"{'dir':>10}  {path.relative_to(root)}/")
    return "\n".join(lines) + "\n"


def record(out: Path, name: str, text: str) -> None:
    (out / name).write_text(text)
    print(f"  {name} ({len(text)} chars)", flush=True)


def tool_text(result: tools.ToolResult) -> str:
    # The JVM's own notes (a class-data archive it could not map) are not Kafka's output.
    stderr = "".join(line for line in result.stderr.splitlines(keepends=True)
                     if not line.startswith("[") or "][warning][cds" not in line)
    return (f"$ {' '.join(result.args[result.args.index('-cp') + 2:])}\n"
            f"# exit {result.returncode}\n{result.stdout}"
            + (f"# stderr\n{stderr}" if stderr.strip() else ""))


def format_trees(out: Path) -> None:
    """Format one node each way, without starting it; record trees and bootstrap files."""
    work = Path(tempfile.mkdtemp(prefix="kraft-facts-format-"))
    try:
        ways = {
            "static": ("controller", ["--config-voters"]),
            "standalone": ("controller", ["--standalone"]),
            "initial-controllers": ("controller", ["--initial-controllers"]),
            "no-initial-controllers-controller": ("controller", ["--no-initial-controllers"]),
            "no-initial-controllers-broker": ("broker", ["--no-initial-controllers"]),
        }
        report = []
        for name, (role, flags) in ways.items():
            node_dir = work / name
            log_dir = node_dir / "kraft-logs"
            node_dir.mkdir(parents=True)
            directory_id = kraft.random_directory_id()
            props = (kraft.controller_properties(3001, 19093, log_dir) if role == "controller"
                     else kraft.broker_properties(1, 19092, log_dir, 1))
            if flags == ["--config-voters"]:
                props["controller.quorum.voters"] = "3001@127.0.0.1:19093"
                flags = []
            else:
                props["controller.quorum.bootstrap.servers"] = "127.0.0.1:19093"
            if flags == ["--initial-controllers"]:
                flags = ["--initial-controllers",
                         f"3001@127.0.0.1:19093:{kraft._uuid_text(directory_id)}"]
            config = node_dir / "server.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (node_dir / "log4j2.properties").write_text(
                LOG4J2_PROPERTIES.format(log_file=node_dir / "server.log"))
            result = tools.run(STORAGE_TOOL_MAIN, "format", "--cluster-id",
                               _random_cluster_id(), "--config", str(config), *flags)
            report.append(f"## {name}: kafka-storage format {' '.join(flags)}\n"
                          f"{tool_text(result)}"
                          f"{tree(log_dir)}\n# meta.properties\n"
                          f"{(log_dir / 'meta.properties').read_text()}\n")
            files = sorted(log_dir.rglob("*.checkpoint"))
            if files and name in ("static", "standalone"):
                dumped = tools.dump_log(*files)
                record(out, f"format-{name}-dump.txt", tool_text(dumped))
        record(out, "format-trees.txt", "\n".join(report))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def wait_for_snapshot(node: kraft.KraftNode, timeout: float = 60.0) -> Path:
    """The first snapshot other than the bootstrap one in ``node``'s metadata dir."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in sorted(node.metadata_dir.glob("*.checkpoint"))
                 if not p.name.startswith("00000000000000000000-")]
        if found:
            return found[-1]
        time.sleep(0.5)
    raise TimeoutError(f"node {node.node_id} wrote no snapshot in {timeout:.0f} s")


def admin(quorum: kraft.KraftQuorum, out: Path) -> None:
    """The writes whose records the dumps below show."""
    bootstrap = quorum.brokers[0].address
    steps = [
        (tools.TOPIC_COMMAND, "--create", "--topic", "facts", "--partitions", "3",
         "--replication-factor", str(min(3, len(quorum.brokers)))),
        (tools.CONFIG_COMMAND, "--alter", "--entity-type", "topics", "--entity-name",
         "facts", "--add-config", "retention.ms=3600000"),
        (tools.CONFIG_COMMAND, "--alter", "--entity-type", "brokers", "--entity-default",
         "--add-config", "log.cleaner.threads=2"),
        (tools.CONFIG_COMMAND, "--alter", "--entity-type", "users", "--entity-name", "alice",
         "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"),
        (tools.CONFIG_COMMAND, "--alter", "--entity-type", "users", "--entity-name", "bob",
         "--add-config", "SCRAM-SHA-512=[password=bob-secret]"),
        (tools.CONFIG_COMMAND, "--alter", "--entity-type", "clients", "--entity-name",
         "facts-client", "--add-config", "producer_byte_rate=1048576"),
        (tools.ACL_COMMAND, "--add", "--allow-principal", "User:alice", "--operation",
         "Read", "--topic", "facts"),
    ]
    log = []
    for main, *args in steps:
        result = tools.run(main, "--bootstrap-server", bootstrap, *args)
        log.append(tool_text(result))
        if result.returncode != 0:
            print(result.describe(), file=sys.stderr)
    record(out, "admin-steps.txt", "\n".join(log))


def api_versions_text(address: str) -> str:
    response = kraft.send(address, ApiVersionsRequest(
        client_software_name="kraft-facts", client_software_version="1"))
    lines = [f"error_code {int(response.error_code)}"]
    lines += [f"api {int(a.api_key):>3} v{int(a.min_version)}-{int(a.max_version)}"
              for a in sorted(response.api_keys, key=lambda a: a.api_key)]
    lines += [f"supported_feature {f.name} {int(f.min_version)}-{int(f.max_version)}"
              for f in response.supported_features]
    lines += [f"finalized_feature {f.name} {int(f.min_version_level)}-"
              f"{int(f.max_version_level)}" for f in response.finalized_features]
    lines.append(f"finalized_features_epoch {int(response.finalized_features_epoch)}")
    lines.append(f"zk_migration_ready {response.zk_migration_ready}")
    return "\n".join(lines) + "\n"


def running_facts(out: Path, voters: kraft.Voters, brokers: int) -> None:
    print(f"starting 3 controllers and {brokers} brokers ({voters})", flush=True)
    with kraft.start_quorum(3, brokers, voters=voters, overrides=SETTINGS) as quorum:
        print(f"  up: format {quorum.format_seconds:.1f} s, start "
              f"{quorum.startup_seconds:.1f} s", flush=True)
        record(out, "cluster.txt",
               f"cluster.id {quorum.cluster_id}\nvoters {voters}\n"
               f"controllers {quorum.controller_bootstrap}\nbrokers {quorum.bootstrap}\n"
               f"startup_seconds {quorum.startup_seconds:.1f}\n"
               f"settings {SETTINGS}\n")
        admin(quorum, out)
        controller = quorum.node(quorum.wait_for_leader())
        follower = next(n for n in quorum.controllers if n is not controller)
        broker = quorum.brokers[0]
        snapshots = {n.node_id: wait_for_snapshot(n) for n in (controller, broker)}
        record(out, "describe-quorum-v2.txt", pprint.pformat(quorum.describe_quorum()))
        record(out, "describe-quorum-v2-follower.txt",
               pprint.pformat(kraft.describe_quorum(follower.address)))
        record(out, "api-versions-controller.txt", api_versions_text(controller.address))
        record(out, "api-versions-broker.txt", api_versions_text(broker.address))
        target = {"bootstrap_controller": quorum.controller_bootstrap}
        for name, args in {
            "quorum-status.txt": ("describe", "--status"),
            "quorum-replication.txt": ("describe", "--replication"),
        }.items():
            record(out, name, tool_text(tools.metadata_quorum(*args, **target)))
        record(out, "quorum-status-via-broker.txt", tool_text(tools.metadata_quorum(
            "describe", "--status", bootstrap_server=broker.address)))
        record(out, "features.txt", tool_text(tools.features("describe", **target)))
        record(out, "features-via-broker.txt", tool_text(
            tools.features("describe", bootstrap_server=broker.address)))
        record(out, "configs-broker.txt", defaults(tools.run(
            tools.CONFIG_COMMAND, "--bootstrap-server", broker.address, "--describe",
            "--all", "--entity-type", "brokers", "--entity-name", str(broker.node_id))))
        record(out, "configs-controller.txt", defaults(tools.run(
            tools.CONFIG_COMMAND, "--bootstrap-controller", controller.address, "--describe",
            "--all", "--entity-type", "brokers", "--entity-name", str(controller.node_id))))
        for node in (controller, follower, broker):
            role = f"{node.role}-{node.node_id}"
            record(out, f"tree-{role}.txt", tree(node.log_dir))
            record(out, f"meta.properties-{role}.txt",
                   (node.log_dir / "meta.properties").read_text())
            for name in ("quorum-state", "partition.metadata", "leader-epoch-checkpoint"):
                path = node.metadata_dir / name
                record(out, f"{name}-{role}.txt",
                       path.read_text() if path.exists() else "(absent)\n")
        for node in (controller, broker):
            role = f"{node.role}-{node.node_id}"
            # A broker that started after the leader's first snapshot loaded it instead
            # of the log's start: its first segment is not 0.
            segment = sorted(node.metadata_dir.glob("*.log"))[0]
            record(out, f"dump-log-{role}.txt", tool_text(tools.dump_log(segment)))
            record(out, f"dump-snapshot-{role}.txt",
                   tool_text(tools.dump_log(snapshots[node.node_id])))
            boot = node.log_dir / "bootstrap.checkpoint"
            if boot.exists():
                record(out, f"dump-bootstrap-checkpoint-{role}.txt",
                       tool_text(tools.dump_log(boot)))
            zero = node.metadata_dir / "00000000000000000000-0000000000.checkpoint"
            if zero.exists():
                record(out, f"dump-zero-snapshot-{role}.txt", tool_text(tools.dump_log(zero)))
        # Trees again after a clean stop: what shutdown adds or removes.
        quorum.remove_work_dir = False
        quorum.stop()
        for node in (controller, broker):
            record(out, f"tree-{node.role}-{node.node_id}-after-stop.txt", tree(node.log_dir))
        shutil.rmtree(quorum.work_dir, ignore_errors=True)


def defaults(result: tools.ToolResult) -> str:
    keep = [line for line in result.stdout.splitlines()
            if line.strip().startswith(DEFAULTS_OF) or not line.startswith(" ")]
    return "\n".join(keep) + "\n" + (result.stderr if result.returncode else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.reference.kraft_facts",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--voters", choices=("dynamic", "static"), default="dynamic")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--skip-format", action="store_true",
                        help="skip the format-only trees")
    args = parser.parse_args(argv)
    out: Path = args.outdir
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    began = time.monotonic()
    if not args.skip_format:
        print("format trees", flush=True)
        format_trees(out)
    running_facts(out, args.voters, args.brokers)
    print(f"done in {time.monotonic() - began:.0f} s: {out}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.TimeoutExpired as e:
        sys.exit(f"a tool timed out: {e}")
