"""One segment's aborted-transaction index, ``<base offset>.txnindex`` (Kafka's
TransactionIndex).

An entry is written when an ABORT marker completing a non-empty transaction is appended
to the segment, in Kafka's format: version int16 (0), producer id int64, first offset
int64, last offset int64 (the marker's), last stable offset int64 (where the log was
stable once the marker was written); 34 bytes. READ_COMMITTED fetches answer the
entries overlapping what they return, so consumers can drop aborted records. The file is
created on the first entry; the entries are kept in memory once read (there are few:
one per aborted transaction).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """Appended on the event loop; the segment fsyncs the file by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[AbortedTxn] = []
        # a torn trailing entry (a crash mid-write) is dropped
        for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
            if version != _VERSION:
                break
            entries.append(AbortedTxn(pid, first, last, lso))
        if len(entries) * ENTRY_SIZE != len(data):
            self._rewrite(entries)  # later appends must not follow the torn bytes
        return entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"the last offset of appended aborted transaction {txn} must exceed "
                f"{entries[-1].last_offset} in {self.path.name}")
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(_VERSION, *txn))
        entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries with last offset >= ``fetch_offset`` and first offset below
        ``upper_bound_offset``; True when no later segment can hold more (an entry
        was stable at or past the bound), as Kafka's collectAbortedTxns."""
        found: list[AbortedTxn] = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = [txn for txn in entries if txn.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._entries = keep
        self._rewrite(keep)

    def reset(self) -> None:
        """Empty (recovery rebuilds it)."""
        self._entries = []
        self.path.unlink(missing_ok=True)

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        with open(self.path, "r+b") as f:
            f.truncate(len(entries) * ENTRY_SIZE)


__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex"]
