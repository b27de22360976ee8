"""What the consumer group tests share, whichever client they drive: coordinator
settings that make rebalances quick, waiting for a condition, members polled on their
own threads, a member in its own process that a test can SIGKILL, and the scenario in
which members split partitions, one dies and one leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# (stable?, client id -> assigned partitions), as a client's admin API describes a group.
GroupView = Callable[[], tuple[bool, dict[str, set[int]]]]

GROUP_SETTINGS = {
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
SESSION_MS = 3000


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def stable_with(view: GroupView, clients: set[str], partitions: int) -> bool:
    """The group is stable, its members are ``clients``, and they own every partition
    once between them."""
    stable, assignment = view()
    owned = sorted(p for ps in assignment.values() for p in ps)
    return stable and set(assignment) == clients and owned == list(range(partitions))


class PolledMember:
    """A subscribed consumer polled on its own thread, as an application would.
    Subclasses poll once (returning the partitions assigned) and close."""

    def __init__(self) -> None:
        self.assigned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PolledMember:
        self._thread.start()
        return self

    def poll_once(self) -> set[int]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.assigned = self.poll_once()
        self.close()

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(15)


@contextmanager
def member_process(script: str, bootstrap: str, group: str, topic: str,
                   client_id: str) -> Iterator[subprocess.Popen[bytes]]:
    """``script`` run as ``script bootstrap group topic client_id session_ms``; killed
    on the way out if the test has not killed it."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, bootstrap, group, topic, client_id, str(SESSION_MS)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def split_then_one_dies_and_one_leaves(
    *,
    start_member: Callable[[str], PolledMember],
    members: list[PolledMember],
    member_script: str,
    bootstrap: str,
    group: str,
    topic: str,
    view: GroupView,
    recovery_bound_s: float,
) -> None:
    """Two members on threads ("a", "b") and one in a process ("c") share a topic of six
    partitions two each; "c" is SIGKILLed (no LeaveGroup) and the survivors take its
    partitions within ``recovery_bound_s``; "a" leaves and "b" owns everything."""

    members.append(start_member("a"))
    members.append(start_member("b"))
    with member_process(member_script, bootstrap, group, topic, "c") as doomed:
        wait_for(lambda: stable_with(view, {"a", "b", "c"}, 6), 30,
                 "three members sharing six partitions")
        assert sorted(len(ps) for ps in view()[1].values()) == [2, 2, 2]
        killed_at = time.monotonic()
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(5)
        wait_for(lambda: stable_with(view, {"a", "b"}, 6), SESSION_MS / 1000 + 10,
                 "the survivors taking the killed member's partitions")
        recovered_s = time.monotonic() - killed_at
        assert recovered_s < recovery_bound_s, recovered_s
        wait_for(lambda: members[0].assigned | members[1].assigned == set(range(6)))
    members.pop(0).leave()
    wait_for(lambda: stable_with(view, {"b"}, 6), 15, "the last member owning every partition")
    wait_for(lambda: members[0].assigned == set(range(6)))
