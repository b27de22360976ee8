"""py-spy over chosen workloads: where a Kafkernel broker spends a timed run.

``python -m bench.run --py-spy 1024b-acksall`` records every Kafkernel broker (kafkernel
and baseline) with py-spy during each run of the workloads whose key contains one of
the substrings, one raw (collapsed stacks) file per run, beside the JSON result. The
samples are taken without pausing the broker (``--nonblocking``), so the figures of
those runs move little; the other workloads run unprofiled.
``python -m bench.profile FILE...`` sums such files: the frames in most samples, and
the leaves.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

RATE_HZ = 250
_LINE = re.compile(r"(\([^()]*):\d+\)$")
ATTACH_TIMEOUT_S = 10.0


def py_spy_executable() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class PySpy:
    def __init__(self, substrings: Sequence[str], directory: Path) -> None:
        self.substrings = [s for s in substrings if s]
        self.directory = directory
        self.executable = py_spy_executable()
        self.files: list[Path] = []

    def wanted(self, workload_key: str) -> bool:
        return any(s in workload_key for s in self.substrings)

    @contextlib.contextmanager
    def record(self, pid: int, name: str) -> Iterator[None]:
        """py-spy on ``pid`` from before the body runs until it has returned."""
        if self.executable is None:
            raise RuntimeError("--py-spy: py-spy is not installed (pip install py-spy)")
        self.directory.mkdir(parents=True, exist_ok=True)
        out = self.directory / f"{name}.txt"
        n = 1
        while out.exists():
            n += 1
            out = self.directory / f"{name}-{n}.txt"
        proc = subprocess.Popen(
            [self.executable, "record", "--pid", str(pid), "--rate", str(RATE_HZ),
             "--nonblocking", "--format", "raw", "--output", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        # Its first line says that sampling has begun.
        first = proc.stdout.readline()
        if proc.poll() is not None:
            raise RuntimeError(f"py-spy exited: {first.strip()}")
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            try:
                proc.communicate(timeout=ATTACH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            if out.exists():
                self.files.append(out)


def summarize(files: Sequence[Path], top: int = 25) -> str:
    """The functions present in the most samples (inclusive) and the leaves (self
    time) over all ``files``, as shares of their samples (py-spy counts busy samples
    only: idle waits are not in them)."""
    inclusive: dict[str, int] = {}
    leaf: dict[str, int] = {}
    total = 0
    for path in files:
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            # One entry per function: py-spy names each frame with its line.
            frames = [_LINE.sub(r"\1)", f) for f in stack.split(";")]
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + count
            leaf[frames[-1]] = leaf.get(frames[-1], 0) + count
    if total == 0:
        return "no samples"
    out = [f"{total} samples in {len(files)} files", "", "inclusive:"]
    for frame, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"{100 * n / total:5.1f}%  {frame}")
    out += ["", "self:"]
    for frame, n in sorted(leaf.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"{100 * n / total:5.1f}%  {frame}")
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize([Path(p) for p in sys.argv[1:]]))
