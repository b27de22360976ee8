"""A deterministic, seeded simulator of a Raft quorum built from ``RaftNode``s.

Voters and observers exchange the kio requests and responses the core emits over a
simulated network with delay (so reordering), loss and partitions; nodes crash (their
quorum-state and flushed log survive, the unflushed tail is lost) and restart. The
simulator checks Raft's safety invariants after every event and records what progress
was made, for the tests to assert on.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from plugins.metadata_kraft.raft.core import (
    Commit,
    Fatal,
    Flush,
    LeaderChanged,
    PersistQuorumState,
    RaftNode,
    Respond,
    Send,
)
from plugins.metadata_kraft.raft.log import InMemoryRaftLog, LogEntry
from plugins.metadata_kraft.raft.quorum_store import ElectionRecord
from plugins.metadata_kraft.raft.state import Leader, RaftConfig, VoterSet


class InvariantViolation(AssertionError):
    pass


class CheckedLog(InMemoryRaftLog):
    """The in-memory log, refusing a truncation that removes a committed entry."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        super().__init__()
        self._sim = sim
        self._node_id = node_id

    def truncate_to(self, offset: int) -> None:
        committed = self._sim.committed
        for o in range(offset, min(self.end_offset, len(committed))):
            if self.entries[o] == committed[o]:
                raise InvariantViolation(
                    f"t={self._sim.now} node {self._node_id} truncates committed entry {o}")
        super().truncate_to(offset)


@dataclass
class SimNode:
    node_id: int
    log: CheckedLog
    disk: ElectionRecord = field(default_factory=ElectionRecord)
    raft: RaftNode | None = None
    incarnation: int = 0
    next_tick: int | None = None
    committed_upto: int = 0  # offsets below were checked against the committed log


@dataclass(frozen=True)
class Scenario:
    voters: int = 3
    observers: int = 1
    fault_ms: int = 4000  # faults happen in [0, fault_ms); then the network heals
    progress_bound_ms: int = 12000  # after healing, a new write is committed by then
    loss: float = 0.05
    max_delay_ms: int = 25
    write_interval_ms: int = 150
    crash_rate: float = 0.0012  # per ms, across the cluster
    partition_rate: float = 0.0006
    restart_ms: tuple[int, int] = (50, 2500)  # how long a crashed node stays down
    flush_ms: tuple[int, int] = (0, 8)  # how long an fsync takes
    # Chance, per action, that the node dies before executing it (and the rest of the
    # list): a persist not ordered before what depends on it shows up as a violation.
    mid_action_crash: float = 0.0
    resign_rate: float = 0.0003  # graceful shutdown of the leader (EndQuorumEpoch), per ms


class Simulation:
    def __init__(self, seed: int, scenario: Scenario | None = None,
                 config: RaftConfig | None = None) -> None:
        self.seed = seed
        self.sc = scenario or Scenario()
        self.config = config or RaftConfig()
        self.rng = random.Random(seed)
        self.now = 0
        self.voter_ids = frozenset(range(1, self.sc.voters + 1))
        ids = list(range(1, self.sc.voters + self.sc.observers + 1))
        self.nodes = {i: SimNode(i, CheckedLog(self, i)) for i in ids}
        self.events: list[tuple[int, int, str, Any]] = []
        self._seq = 0
        self._requests: dict[int, tuple[int, int, int]] = {}  # id -> (origin, inc, corr)
        self._next_request_id = 0
        self.partition: frozenset[int] = frozenset()  # nodes cut off from the rest
        self.loss = self.sc.loss
        self.committed: list[LogEntry] = []
        self.commit_epoch: list[int] = []
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.written: list[tuple[int, bytes]] = []  # (time, payload) appended by a leader
        self.healed_at: int | None = None
        self.first_commit_after_heal: int | None = None
        self.counts = {"crash": 0, "partition": 0, "resign": 0, "elections": 0, "events": 0}
        for node in self.nodes.values():
            self._boot(node)

    # -- plumbing -------------------------------------------------------------------------

    def _push(self, at: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, payload))

    def _boot(self, node: SimNode) -> None:
        node.incarnation += 1
        rng = random.Random(self.seed * 1_000_003 + node.node_id * 1009 + node.incarnation)
        node.raft = RaftNode(node_id=node.node_id, voters=VoterSet(self.voter_ids),
                             log=node.log, election=node.disk, now_ms=self.now,
                             config=self.config, rng=rng, cluster_id="sim")
        node.committed_upto = 0
        node.next_tick = None
        self._apply(node, node.raft.start(self.now))

    def _schedule_tick(self, node: SimNode) -> None:
        if node.raft is None:
            return
        at = max(self.now, node.raft.next_deadline())
        if node.next_tick is None or at < node.next_tick or node.next_tick < self.now:
            node.next_tick = at
            self._push(at, "tick", (node.node_id, node.incarnation, at))

    def _connected(self, a: int, b: int) -> bool:
        return (a in self.partition) == (b in self.partition)

    def _transmit(self, src: int, dst: int, message: tuple[Any, ...]) -> None:
        if not self._connected(src, dst) or self.rng.random() < self.loss:
            return
        self._push(self.now + self.rng.randint(1, self.sc.max_delay_ms), "deliver",
                   (src, dst, message))

    # -- actions --------------------------------------------------------------------------

    def _apply(self, node: SimNode, actions: list[Any]) -> None:
        for action in actions:
            if self.healed_at is None and self.rng.random() < self.sc.mid_action_crash:
                self._crash(node)
                return
            if isinstance(action, Send):
                self._next_request_id += 1
                self._requests[self._next_request_id] = (
                    node.node_id, node.incarnation, action.correlation_id)
                self._transmit(node.node_id, action.destination,
                               ("req", self._next_request_id, action.request))
            elif isinstance(action, Respond):
                origin, incarnation, corr = self._requests.pop(action.request_id)
                self._transmit(node.node_id, origin,
                               ("resp", incarnation, corr, action.response))
            elif isinstance(action, PersistQuorumState):
                node.disk = action.record
            elif isinstance(action, Flush):
                self._push(self.now + self.rng.randint(*self.sc.flush_ms), "flushed",
                           (node.node_id, node.incarnation, action.offset))
            elif isinstance(action, Commit):
                self._check_commit(node, action.high_watermark)
            elif isinstance(action, LeaderChanged):
                self._check_leader(node, action)
            elif isinstance(action, Fatal):
                raise InvariantViolation(f"t={self.now} node {node.node_id}: {action.reason}")
        self._schedule_tick(node)

    # -- invariants -----------------------------------------------------------------------

    def _check_leader(self, node: SimNode, change: LeaderChanged) -> None:
        if change.leader_id != node.node_id:
            return
        self.counts["elections"] += 1
        other = self.leaders.setdefault(change.epoch, node.node_id)
        if other != node.node_id:
            raise InvariantViolation(
                f"t={self.now} two leaders in epoch {change.epoch}: {other}, {node.node_id}")
        # Leader completeness: everything committed in an earlier epoch is in its log.
        for offset, entry in enumerate(self.committed):
            if self.commit_epoch[offset] < change.epoch and (
                    offset >= node.log.end_offset or node.log.entries[offset] != entry):
                raise InvariantViolation(
                    f"t={self.now} leader {node.node_id} of epoch {change.epoch} lacks "
                    f"committed offset {offset}")

    def _check_commit(self, node: SimNode, high_watermark: int) -> None:
        if high_watermark > node.log.end_offset:
            raise InvariantViolation(f"node {node.node_id} commits past its log end")
        epoch = node.raft.quorum.epoch if node.raft else 0
        for offset in range(node.committed_upto, high_watermark):
            entry = node.log.entries[offset]
            if offset < len(self.committed):
                if self.committed[offset] != entry:
                    raise InvariantViolation(
                        f"t={self.now} node {node.node_id} committed {entry} at {offset}, "
                        f"another node committed {self.committed[offset]}")
                self.commit_epoch[offset] = min(self.commit_epoch[offset], epoch)
            else:
                self.committed.append(entry)
                self.commit_epoch.append(epoch)
                if self.healed_at is not None and self.first_commit_after_heal is None \
                        and any(w[1] == entry.payload and w[0] >= self.healed_at
                                for w in self.written[-50:]):
                    self.first_commit_after_heal = self.now
        node.committed_upto = max(node.committed_upto, high_watermark)

    def check_prefixes(self) -> None:
        """Every live node's committed prefix is the committed log's prefix, and a prefix
        of the log of the leader with the highest epoch."""
        leaders = [n for n in self.nodes.values()
                   if n.raft is not None and isinstance(n.raft.quorum.state, Leader)]
        newest = max(leaders, key=lambda n: n.raft.quorum.epoch if n.raft else 0,
                     default=None)
        for node in self.nodes.values():
            for offset in range(node.committed_upto):
                if offset >= node.log.end_offset or \
                        node.log.entries[offset] != self.committed[offset]:
                    raise InvariantViolation(
                        f"node {node.node_id} lost or changed committed offset {offset}")
                # (A stale leader may lack what a later epoch committed while it was cut
                # off: only entries committed up to its own epoch must be there.)
                if newest is not None and newest.raft is not None and \
                        self.commit_epoch[offset] <= newest.raft.quorum.epoch and (
                        offset >= newest.log.end_offset
                        or newest.log.entries[offset] != self.committed[offset]):
                    raise InvariantViolation(
                        f"leader {newest.node_id} lacks offset {offset} that node "
                        f"{node.node_id} committed")

    # -- faults and load ------------------------------------------------------------------

    def _crash(self, node: SimNode) -> None:
        self.counts["crash"] += 1
        node.raft = None
        node.log.crash()
        self._push(self.now + self.rng.randint(*self.sc.restart_ms), "restart",
                   (node.node_id, node.incarnation))

    def _maybe_fault(self, step_ms: int) -> None:
        sc = self.sc
        if self.rng.random() < sc.crash_rate * step_ms:
            node = self.nodes[self.rng.choice(sorted(self.nodes))]
            if node.raft is not None:
                self._crash(node)
        if self.rng.random() < sc.resign_rate * step_ms:
            for node in self.nodes.values():
                if node.raft is not None and isinstance(node.raft.quorum.state, Leader):
                    self.counts["resign"] += 1
                    self._apply(node, node.raft.resign(self.now))
                    self._push(self.now + self.rng.randint(20, 300), "shutdown",
                               (node.node_id, node.incarnation))
                    break
        if self.rng.random() < sc.partition_rate * step_ms and not self.partition:
            size = self.rng.randint(1, len(self.nodes) // 2)
            self.partition = frozenset(self.rng.sample(sorted(self.nodes), size))
            self.counts["partition"] += 1
            self._push(self.now + self.rng.randint(300, 3500), "heal_partition", None)

    def _write(self) -> None:
        leaders = [n for n in self.nodes.values()
                   if n.raft is not None and isinstance(n.raft.quorum.state, Leader)]
        if not leaders:
            return
        node = max(leaders, key=lambda n: n.raft.quorum.epoch if n.raft else 0)
        assert node.raft is not None
        payload = f"w{len(self.written)}@{self.now}".encode()
        actions, _ = node.raft.append([payload], self.now)
        self.written.append((self.now, payload))
        self._apply(node, actions)

    def heal(self) -> None:
        self.healed_at = self.now
        self.partition = frozenset()
        self.loss = 0.0
        for node in self.nodes.values():
            if node.raft is None:
                self._boot(node)

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        sc = self.sc
        end = sc.fault_ms + sc.progress_bound_ms
        self._push(0, "clock", None)
        self._push(sc.fault_ms, "heal", None)
        same_time = 0
        while self.events:
            at, _, kind, payload = heapq.heappop(self.events)
            if at > end or self.first_commit_after_heal is not None:
                break
            same_time = same_time + 1 if at == self.now else 0
            if same_time > 5000:  # a node asking to be ticked now, forever
                raise InvariantViolation(f"t={at}: time stands still ({kind} {payload})")
            self.now = at
            self.counts["events"] += 1
            self._dispatch(kind, payload)
        self.check_prefixes()

    def _dispatch(self, kind: str, payload: Any) -> None:
        sc = self.sc
        if kind == "clock":  # load and faults, every write interval
            if self.healed_at is None:
                self._maybe_fault(sc.write_interval_ms)
            self._write()
            self._push(self.now + sc.write_interval_ms, "clock", None)
        elif kind == "heal":
            self.heal()
        elif kind == "heal_partition":
            self.partition = frozenset()
        elif kind == "shutdown":  # the end of a graceful shutdown: the process exits
            node_id, incarnation = payload
            node = self.nodes[node_id]
            if node.raft is not None and node.incarnation == incarnation:
                self._crash(node)
        elif kind == "restart":
            node_id, incarnation = payload
            node = self.nodes[node_id]
            if node.raft is None and node.incarnation == incarnation:
                self._boot(node)
        elif kind == "tick":
            node_id, incarnation, at = payload
            node = self.nodes[node_id]
            if node.raft is not None and node.incarnation == incarnation \
                    and node.next_tick == at:
                node.next_tick = None
                self._apply(node, node.raft.on_tick(self.now))
        elif kind == "flushed":
            node_id, incarnation, offset = payload
            node = self.nodes[node_id]
            if node.raft is not None and node.incarnation == incarnation:
                node.log.flush(offset)
                self._apply(node, node.raft.on_flushed(self.now))
        elif kind == "deliver":
            self._deliver(*payload)

    def _deliver(self, src: int, dst: int, message: tuple[Any, ...]) -> None:
        node = self.nodes[dst]
        if node.raft is None or not self._connected(src, dst):
            return
        if message[0] == "req":
            _, request_id, request = message
            self._apply(node, node.raft.on_request(request_id, request, self.now))
        else:
            _, incarnation, corr, response = message
            if incarnation == node.incarnation:
                self._apply(node, node.raft.on_response(src, corr, response, self.now))
