"""Run a command that dies with the benchmark: ``python -m bench.orphan_guard CMD ARG...``.

Sets Linux's parent-death signal (SIGTERM) and then execs the command in place, so the
broker keeps this process id (its /proc figures are the broker's own: exec starts a
fresh address space) and still goes away if the benchmark is killed outright, when no
``finally`` gets to run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m bench.orphan_guard CMD [ARG...]")
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            sys.exit(1)
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
