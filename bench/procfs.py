"""Memory and CPU of a broker process, read from /proc (Linux), no extra dependency."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process: resident set now, its high-water mark, CPU used so far."""

    rss_kb: int
    hwm_kb: int
    cpu_s: float


def sample(pid: int) -> ProcSample | None:
    """None once the process is gone (or outside Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    # Fields after the parenthesised command name; utime and stime are the 14th and
    # 15th fields of the line, counted in clock ticks and covering all threads.
    after = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(after[11]) + int(after[12])) / ticks
    return ProcSample(fields.get("VmRSS", 0), fields.get("VmHWM", 0), cpu)


def reset_peak(pid: int) -> bool:
    """Start VmHWM over from the current RSS (Linux clear_refs "5"), so that the peak of
    the workloads is told apart from a transient one while the process starts."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
