"""An export job (``python -m spark.export``) as a child process of the test, in a
process group of its own so the JVM under it goes too when the test stops or kills it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark.options import ExportOptions
from spark.progress import exported_offsets

# Tests run from the checkout: the child imports the same code.
REPO = Path(__file__).resolve().parent.parent.parent


class ExportProcess:
    def __init__(self, options: ExportOptions, log: Path, *extra: str) -> None:
        self.options = options
        self.log = log
        self.args = [sys.executable, "-m", "spark.export", *options.to_args(), *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ExportProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
        return self

    def wait_exported(self, ends: dict[tuple[str, int], int], timeout: float = 120.0) -> None:
        """Until the checkpoint's last commit reaches ``ends`` on every partition."""
        deadline = time.monotonic() + timeout
        while True:
            got = exported_offsets(self.options.checkpoint_location)
            if all(got.get(tp, -1) >= end for tp, end in ends.items()):
                return
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the export exited with {self.proc.returncode}:\n"
                                     + self.log.read_text()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError(f"export at {got}, not {ends}, after {timeout} s")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL to the whole group: the job dies mid-batch, as in a crash."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM: the job stops its query and exits; whatever is left is killed."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):  # the JVM, should it outlive Python
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode
