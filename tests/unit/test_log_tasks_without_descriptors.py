"""Issue 30: a periodic log task that finds no free file descriptor logs one clear line
(not an error per run) and runs again at its next interval, succeeding once
descriptors are free. Run in a process of its own: it exhausts that process's
descriptors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, os, resource, sys, time
    from pathlib import Path
    from kernel.config import load_config
    from kernel.logging import make_logger
    from kernel.log.manager import LogManager

    async def main(directory: Path) -> None:
        cfg = load_config(None, ["replica.high.watermark.checkpoint.interval.ms=50",
                                 "log.flush.offset.checkpoint.interval.ms=50"]).broker
        manager = LogManager([directory], cfg, logger=make_logger("json", "info",
                             stream=sys.stdout), high_watermark=lambda log: 0)
        manager.lock_dirs()
        await manager.start()
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        await asyncio.sleep(1.0)  # about 20 runs of each checkpoint task
        for fd in held:
            os.close(fd)
        print("RELEASED", time.time(), flush=True)
        await asyncio.sleep(0.5)
        await manager.stop()

    asyncio.run(main(Path(sys.argv[1])))
""")


def test_a_log_task_out_of_descriptors_logs_once_and_runs_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(data)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    released = next(float(line.split()[1]) for line in out.splitlines()
                    if line.startswith("RELEASED"))
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [e for e in events if e.get("level") == "error"] == []
    told = [e for e in events if "out of file descriptors" in e["event"]]
    # Once per task in the period, however many runs failed.
    assert sorted(e["event"].split()[2] for e in told) == [
        "checkpoint", "checkpoint_high_watermarks"], told
    assert all("runs again in 50 ms" in e["event"] for e in told)
    # Runs again, and succeeds, once descriptors are free.
    assert (data / "replication-offset-checkpoint").stat().st_mtime > released
