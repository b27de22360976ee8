"""A plugin that holds back a partition's last stable offset the way the transactions
plugin will: :meth:`HoldStableOffset.begin` opens a "transaction" that starts at the
next append to the partition (it hears the append before the high watermark moves),
:meth:`HoldStableOffset.end` closes it. Both run on the broker's event loop.

Enable it with
    [plugins]
    enabled = ["metadata_kraft", "tests.plugins.stable_offset_plugin:HoldStableOffset"]
"""

from __future__ import annotations

from typing import Any

from kernel.hookspecs import hookimpl

NAME = "tests.plugins.stable_offset_plugin:HoldStableOffset"


class HoldStableOffset:
    def __init__(self) -> None:
        self._replicas: Any = None
        self._beginning: set[tuple[str, int]] = set()
        self.open: dict[tuple[str, int], int] = {}  # partition -> first unstable offset

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> None:
        self._replicas = broker.replicas

    @hookimpl
    def kafkernel_log_appended(self, topic: str, partition: int, base_offset: int,
                               last_offset: int) -> None:
        tp = (topic, partition)
        if tp in self._beginning:
            self._beginning.discard(tp)
            self.open[tp] = base_offset
            self._replicas.update_first_unstable_offset(topic, partition, base_offset)

    def begin(self, topic: str, partition: int) -> None:
        self._beginning.add((topic, partition))

    def end(self, topic: str, partition: int) -> None:
        del self.open[(topic, partition)]
        self._replicas.update_first_unstable_offset(topic, partition, None)
