"""What a real client did with the broker's fetch sessions, watched from the test while it
runs: a thread samples the broker's session cache (the gauge's source) every few
milliseconds."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from kernel.testing.embedded import EmbeddedBroker


class SessionWatch:
    """The most sessions seen at once and the highest session epoch seen: above 1, the
    broker accepted incremental fetches in a session (each one moves its epoch on)."""

    def __init__(self, broker: EmbeddedBroker, interval_s: float = 0.005) -> None:
        assert broker.broker is not None
        self._cache = broker.broker.fetch_sessions
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.most_sessions = 0
        self.highest_epoch = 0
        self.most_partitions = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sessions = self._cache.sessions()
                self.most_sessions = max(self.most_sessions, len(sessions))
                for s in sessions:
                    self.highest_epoch = max(self.highest_epoch, s.epoch)
                    self.most_partitions = max(self.most_partitions, len(s.partitions))
            except RuntimeError:  # the loop thread changed the cache while it was copied
                pass
            time.sleep(self._interval_s)

    def __enter__(self) -> SessionWatch:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
