"""A static quorum of three controller-only Kafkernel nodes (process.roles=controller),
each a real process (``tests.broker_process``), formatted with one cluster id as
``kafka-storage format`` would. Used by tests/integration/test_kraft_quorum.py and as the
``kafkernel`` target of tests/reference/test_kraft_rpc_reference.py."""

from __future__ import annotations

from pathlib import Path

from tests.broker_process import BrokerProcess, free_port

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
SEGMENT = Path("__cluster_metadata-0") / "00000000000000000000.log"


class KafkernelQuorum:
    def __init__(self, root: Path, size: int = 3, overrides: tuple[str, ...] = ()) -> None:
        self.ports = {node: free_port() for node in range(1, size + 1)}
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.ports.items())
        self.nodes: dict[int, BrokerProcess] = {}
        for node, port in self.ports.items():
            workdir = root / f"controller-{node}"
            data = workdir / "data"
            data.mkdir(parents=True)
            (data / "meta.properties").write_text(
                f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node}\n")
            proc = BrokerProcess(
                workdir, "process.roles=controller", f"node.id={node}",
                f"listeners=CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                f"controller.quorum.voters={voters}", *overrides, port=port,
                plugins=("metadata_kraft",))
            toml = workdir / "kafkernel.toml"  # no coordinator settings: not enabled
            toml.write_text(toml.read_text().split("[plugins.coordinator]")[0])
            self.nodes[node] = proc

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(self.address(n) for n in self.ports)

    def segment(self, node: int) -> Path:
        return self.nodes[node].workdir / "data" / SEGMENT

    def start(self) -> KafkernelQuorum:
        for proc in self.nodes.values():
            proc.start()
        return self

    def stop(self) -> None:
        for proc in self.nodes.values():
            proc.stop()
