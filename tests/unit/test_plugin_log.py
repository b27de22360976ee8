"""kernel.api.log: a plugin-owned log on the kernel's storage, with the surface a Raft
replica needs (append as leader and as follower, read, truncate, epochs)."""

from __future__ import annotations

from pathlib import Path

from kernel.api.log import open_plugin_log
from kernel.api.records import SimpleRecord, build_batch, iter_batches


def _batch(base_offset: int, epoch: int, n: int = 2, control: bool = False) -> bytes:
    key = b"\x00\x00\x00\x02" if control else None
    return build_batch([SimpleRecord(key=key, value=b"v%d" % i) for i in range(n)],
                       base_offset=base_offset, base_timestamp=1,
                       partition_leader_epoch=epoch, is_control=control)


def test_leader_and_follower_appends_epochs_truncation_and_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    log = open_plugin_log(directory)
    assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (0, 0, None)
    assert log.append_as_leader(_batch(0, 1, control=True), 1) == (0, 1)
    assert log.append_as_leader(_batch(99, 1), 1) == (2, 3)  # offsets assigned at the end
    assert log.append_as_follower(_batch(4, 3, n=3)) == (4, 6)
    log.flush()
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(2) == (1, 4)
    assert log.end_offset_for_epoch(3) == (3, 7)
    headers = [h for h, _ in iter_batches(log.read(2, 1 << 20))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(2, 1), (4, 3)]
    assert log.truncate_to(4)
    assert (log.log_end_offset, log.latest_epoch) == (4, 1)
    log.close()

    for name in ("00000000000000000000.log", "00000000000000000000.index",
                 "00000000000000000000.timeindex", "leader-epoch-checkpoint"):
        assert (directory / name).exists(), name
    # A torn tail (half a batch) is truncated when the log opens again.
    with (directory / "00000000000000000000.log").open("ab") as f:
        f.write(_batch(4, 1)[:30])
    log = open_plugin_log(directory)
    assert (log.log_end_offset, log.latest_epoch) == (4, 1)
    log.close()
