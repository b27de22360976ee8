"""The fuzzer's oracle around a broker process: every input goes on a fresh connection;
after each one the broker must still be running and must have logged no error and
no traceback; every few inputs a new connection must get an ApiVersions answer and
the broker's RSS must stay under a bound."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections import deque

from tests.broker_process import BrokerProcess

# A broker at rest holds ~45 MB; the fuzzer's requests are small.
RSS_BOUND = 400 * 1024 * 1024
CHECK_EVERY = 25
ANSWER_WAIT_S = 0.3


class BrokerDown(AssertionError):
    pass


class Fuzzer:
    def __init__(self, broker: BrokerProcess, rss_bound: int = RSS_BOUND) -> None:
        self.broker = broker
        self.rss_bound = rss_bound
        self.sent = 0
        self.answered = 0
        self.closed_by_broker = 0
        self.peak_rss = 0
        self._log_offset = broker.log_path.stat().st_size
        self._recent: deque[bytes] = deque(maxlen=8)
        self.topic_id = uuid.UUID(int=0)  # of the topic the produce inputs go to

    def send(self, data: bytes, port: int | None = None, pieces: int = 1,
             pause_s: float = 0.0) -> None:
        """One input on a new connection (to the broker's port, or ``port`` of another of
        its listeners), in ``pieces`` writes ``pause_s`` apart (a trickling client);
        waits briefly for an answer or a close."""
        self._recent.append(data)
        self.sent += 1
        try:
            with socket.create_connection(("127.0.0.1", port or self.broker.port),
                                          timeout=5) as sock:
                step = -(-len(data) // max(pieces, 1)) or 1
                for at in range(0, len(data), step):
                    if at and pause_s:
                        time.sleep(pause_s)
                    sock.sendall(data[at:at + step])
                sock.settimeout(ANSWER_WAIT_S)
                try:
                    got = sock.recv(65536)
                except TimeoutError:
                    got = None  # a long poll, acks=0, or a frame still incomplete
                if got == b"":
                    self.closed_by_broker += 1
                elif got:
                    self.answered += 1
        except ConnectionError:
            self.closed_by_broker += 1
        self.check(full=self.sent % CHECK_EVERY == 0)

    def check(self, full: bool = True) -> None:
        if not self.broker.alive:
            self._fail(f"the broker exited with {self.broker.proc.returncode}")  # type: ignore[union-attr]
        problems = self._new_problems()
        if problems:
            self._fail("the broker logged:\n" + "\n".join(problems))
        if full:
            if not self.broker.answers():
                self._fail("a new connection got no ApiVersions answer")
            rss = self.broker.rss_bytes()
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.rss_bound:
                self._fail(f"RSS {rss >> 20} MiB is over {self.rss_bound >> 20} MiB")

    def _new_problems(self) -> list[str]:
        with self.broker.log_path.open("rb") as f:
            f.seek(self._log_offset)
            new = f.read()
        complete = new[:new.rfind(b"\n") + 1]
        self._log_offset += len(complete)
        bad = []
        for line in complete.decode(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                bad.append(line)
                continue
            if event.get("level") in ("error", "critical") or "exception" in event:
                bad.append(json.dumps(event)[:3000])
        return bad

    def _fail(self, what: str) -> None:
        recent = "\n".join(d[:300].hex() for d in self._recent)
        raise BrokerDown(f"{what}\nafter {self.sent} inputs; the last ones (hex):\n{recent}")

    def summary(self) -> str:
        return (f"sent={self.sent} answered={self.answered} "
                f"closed_by_broker={self.closed_by_broker} peak_rss={self.peak_rss >> 20}MiB")
