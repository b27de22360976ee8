"""Start-up failures of ``kafkernel serve`` and ``kafkernel config check``, run as a user
runs them: each is one stderr line naming the file and the key, a non-zero exit, no
traceback and nothing logged around it."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.cluster import NewTopic
from kernel.testing.embedded import EmbeddedBroker
from tests.plugin_fixtures.failing_plugin import CRASHES, CRASHES_LATER
from tests.plugin_fixtures.failing_plugin import NAME as FAILING

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


def _run(*args: str, preexec_fn: Callable[[], None] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernel", *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, preexec_fn=preexec_fn)


def _config(tmp_path: Path, log_dir: Path | str | None = None, extra: str = "") -> Path:
    cfg = tmp_path / "k.toml"
    cfg.write_text(
        'listeners = "PLAINTEXT://127.0.0.1:0"\n'
        f'log.dirs = "{log_dir or tmp_path / "data"}"\n{extra}'
        '[plugins]\nenabled = ["metadata_kraft", "coordinator"]\n'
    )
    return cfg


def _one_line_failure(result: subprocess.CompletedProcess[str], cfg: Path, key: str,
                      problem: str) -> str:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{cfg}: {key}: "), lines[0]
    assert problem.lower() in lines[0].lower()
    return lines[0]


@contextlib.contextmanager
def _port_in_use() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(("override", "key", "problem"), [
    ("metrics.port=99999", "metrics.port", "a port in [0, 65535], or -1 to disable"),
    ("metrics.port=-2", "metrics.port", "a port in [0, 65535]"),
    ('listeners="PLAINTEXT://127.0.0.1:70000"', "listeners", "a port in [0, 65535]"),
    ('advertised.listeners="PLAINTEXT://h:65536"', "advertised.listeners",
     "a port in [0, 65535]"),
    ('listeners="127.0.0.1:9092"', "listeners", "NAME://host:port"),
    ('listener.security.protocol.map="PLAINTEXT:TLS"', "listener.security.protocol.map",
     "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("log.dirs=[]", "log.dirs", "a non-empty list"),
    ("num.partitions=3000000000", "num.partitions", "a 32-bit int"),
    ("log.segment.bytes=1048575", "log.segment.bytes", "a value >= 1048576"),
    ("log.retention.hours=-5", "log.retention.hours", "a value >= -1"),
    ("default.replication.factor=40000", "default.replication.factor", "[1, 32767]"),
    ("plugins.coordinator.offsets.topic.replication.factor=40000",
     "plugins.coordinator.offsets.topic.replication.factor", "[1, 32767]"),
    ("controller.quorum.voters=1@localhost", "controller.quorum.voters",
     "expected {id}@{host}:{port} entries (no host:port after the @ of '1@localhost')"),
])
def test_config_check_refuses_out_of_range_settings(
    tmp_path: Path, override: str, key: str, problem: str,
) -> None:
    cfg = _config(tmp_path)
    _one_line_failure(_run("config", "check", str(cfg), "--override", override),
                      cfg, key, problem)


def test_config_check_refuses_a_quorum_of_several_voters(tmp_path: Path) -> None:
    # Valid for Kafka; the metadata_kraft plugin's configure step says it cannot run it.
    cfg = tmp_path / "k.toml"
    cfg.write_text('process.roles = "broker,controller"\nnode.id = 1\n'
                   'listeners = "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:9093"\n'
                   'controller.listener.names = "CONTROLLER"\n'
                   'controller.quorum.voters = "1@127.0.0.1:9093,2@127.0.0.1:9094"\n'
                   f'log.dirs = "{tmp_path / "data"}"\n'
                   '[plugins]\nenabled = ["metadata_kraft", "coordinator"]\n')
    result = _run("config", "check", str(cfg))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"{cfg}:5: controller.quorum.voters: a quorum of several voters (also [2]) is not "
        "supported yet on a broker: the metadata_kraft plugin runs a quorum of "
        "controller-only nodes (process.roles=controller), or one node, the only voter"]


def test_metrics_port_in_use(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    with _port_in_use() as port:
        result = _run("serve", "--config", str(cfg), "--override", f"metrics.port={port}")
    _one_line_failure(result, cfg, "metrics.port", "Address already in use")


def test_listener_port_in_use(tmp_path: Path) -> None:
    with _port_in_use() as port:
        cfg = _config(tmp_path)
        cfg.write_text(cfg.read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        result = _run("serve", "--config", str(cfg))
    _one_line_failure(result, cfg, "listeners", "address already in use")


def test_sasl_listener_without_a_mechanism(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    cfg.write_text(cfg.read_text().replace(
        'listeners = "PLAINTEXT://127.0.0.1:0"',
        'listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"'))
    result = _run("serve", "--config", str(cfg))
    _one_line_failure(result, cfg, "listeners", "SASL_PLAINTEXT: a SASL listener needs a "
                      "SASL mechanism, and no enabled plugin offers one on it")


@pytest.mark.parametrize(("settings", "key", "problem"), [
    ('"sasl.mechanism.inter.broker.protocol" = "PLAIN"\n'
     '"listener.name.sasl_plaintext.plain.sasl.jaas.config" = "x.PlainLoginModule required '
     'username=\\"broker\\";"\n',
     "listener.name.sasl_plaintext.plain.sasl.jaas.config", "the login has no password"),
    ('"sasl.jaas.config" = "x.PlainLoginModule required username=u password=p;"\n',
     "sasl.mechanism.inter.broker.protocol", "GSSAPI is not supported"),
])
def test_a_bad_inter_broker_login_is_one_line(tmp_path: Path, settings: str, key: str,
                                              problem: str) -> None:
    cfg = _config(tmp_path, extra='"inter.broker.listener.name" = "SASL_PLAINTEXT"\n'
                  + settings)
    cfg.write_text(cfg.read_text().replace(
        'listeners = "PLAINTEXT://127.0.0.1:0"',
        'listeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"').replace(
        '"coordinator"]', '"coordinator", "auth_sasl"]'))
    result = _run("config", "check", str(cfg))
    _one_line_failure(result, cfg, key, problem)


def test_log_dir_locked_by_a_running_broker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    running = EmbeddedBroker(data_dir=data).start()
    try:
        cfg = _config(tmp_path, data, extra="metrics.port = 0\n")
        result = _run("serve", "--config", str(cfg))
        line = _one_line_failure(result, cfg, "log.dirs", "in use by another running broker")
        assert str(data) in line
    finally:
        running.stop()


def test_log_dir_that_is_a_file(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    cfg = _config(tmp_path, not_a_dir)
    _one_line_failure(_run("serve", "--config", str(cfg)), cfg, "log.dirs",
                      "exists and is not a directory")
    cfg = _config(tmp_path, not_a_dir / "below")
    _one_line_failure(_run("serve", "--config", str(cfg)), cfg, "log.dirs",
                      "cannot be created or written: Not a directory")


def test_log_dir_that_takes_no_writes(tmp_path: Path) -> None:
    """Writes refused by the kernel (here a file size limit of 0 bytes, which needs no
    privileges): found at start, not at the first produce."""
    cfg = _config(tmp_path)

    def no_file_growth() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))

    result = _run("serve", "--config", str(cfg), preexec_fn=no_file_growth)
    _one_line_failure(result, cfg, "log.dirs", "is not writable: File too large")


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root: " + mounted.stderr.decode().strip())
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_full_log_dir(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "full", "size=64k") as mount:
        (mount / "data").mkdir()
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as f:
            while True:
                f.write(bytes(4096))
        cfg = _config(tmp_path, mount / "data")
        result = _run("serve", "--config", str(cfg))
    _one_line_failure(result, cfg, "log.dirs", "No space left on device")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_read_only_log_dir(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro") as mount:
        cfg = _config(tmp_path, mount)
        result = _run("serve", "--config", str(cfg))
    _one_line_failure(result, cfg, "log.dirs", "Read-only file system")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode 0555 directory")
def test_unwritable_log_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    cfg = _config(tmp_path, data)
    _one_line_failure(_run("serve", "--config", str(cfg)), cfg, "log.dirs",
                      "Permission denied")


@pytest.mark.parametrize("key", ["metadata.log.dir",
                                 "plugins.metadata_kraft.metadata.log.dir"])  # deprecated
def test_metadata_log_dir_that_cannot_be_created(tmp_path: Path, key: str) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    cfg = _config(tmp_path)
    result = _run("serve", "--config", str(cfg), "--override", f'{key}="{not_a_dir}/meta"')
    if key.startswith("plugins."):  # the deprecated name is used, with a warning line
        warning, _, rest = result.stderr.partition("\n")
        assert f"{key} is deprecated: set the top-level metadata.log.dir" in warning
        result.stderr = rest
    _one_line_failure(result, cfg, key, "Not a directory")


def test_a_start_that_fails_after_plugins_started_stops_quietly(tmp_path: Path) -> None:
    """The coordinator had started when a later plugin refused: its tasks must not
    outlive the timer (once 50 'timer is shut down' errors) and nothing is logged after
    the error."""
    cfg = _config(tmp_path)
    cfg.write_text(cfg.read_text().replace('"coordinator"]', f'"coordinator", "{FAILING}"]'))
    result = subprocess.run([sys.executable, "-m", "kernel", "serve", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1] == f"{cfg}: plugins.enabled: {FAILING} refuses to start"
    assert "created an internal topic" in result.stderr  # the coordinator had started
    assert "__consumer_offsets" in result.stderr
    for line in lines[:-1]:
        assert "[info" in line, line  # no error, no traceback
    assert "broker stopped" not in result.stderr


@pytest.mark.parametrize(("plugin", "problem"), [
    (CRASHES, "KeyError: 'missing setting'"),
    (CRASHES_LATER, "OSError: [Errno 98] Address already in use"),
])
def test_a_plugin_that_crashes_at_start_up_is_one_line(
    tmp_path: Path, plugin: str, problem: str,
) -> None:
    """Any exception from a plugin's start-up, not only a StartupError, ends in one line
    that names the plugin's module and the exception, not a traceback."""
    cfg = _config(tmp_path)
    cfg.write_text(cfg.read_text().replace('"coordinator"]', f'"coordinator", "{plugin}"]'))
    result = subprocess.run([sys.executable, "-m", "kernel", "serve", "--config", str(cfg)],
                            capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1] == (f"{cfg}: plugins.enabled: a plugin failed to start "
                         f"(tests.plugin_fixtures.failing_plugin): {problem}"), result.stderr
    for line in lines[:-1]:
        assert "[info" in line, line


def test_serve_raises_the_open_files_limit(tmp_path: Path) -> None:
    """Each active segment holds files: a default soft limit of 1024 is a few hundred
    partitions. serve raises it to the hard limit and says so."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    cfg = _config(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "kernel", "serve", "--config", str(cfg)],
                            stderr=subprocess.PIPE, text=True, preexec_fn=low_soft_limit)
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the limit is logged right after this line
            seen.append(line)
            if "broker started" in line or "Traceback" in line:
                break
        limits = Path(f"/proc/{proc.pid}/limits")
        if limits.exists():
            row = next(r for r in limits.read_text().splitlines() if "open files" in r)
            assert int(row.split()[3]) > 256, row
    finally:
        proc.send_signal(signal.SIGTERM)
        # Not communicate(timeout=...): it reads the pipe itself and would lose the lines
        # the loop above has already buffered (the limit's line often came in the same
        # read as "broker started"). The rest is small enough for the pipe.
        proc.wait(timeout=TIMEOUT_S)
        rest = proc.stderr.read()
    assert proc.returncode == 0
    raised = [ln for ln in [*seen, *rest.splitlines()] if "raised the open files limit" in ln]
    assert len(raised) == 1 and "was=256" in raised[0], "".join(seen) + rest


def test_an_image_delivered_while_the_broker_stops_is_not_followed() -> None:
    """The metadata backend stops after the log manager (its session is the broker's
    registration), so it may still deliver an image then; one naming a partition new
    to this broker must not open a log on the closed log manager."""
    b = EmbeddedBroker().start()
    try:
        assert b.broker is not None
        backend = b.broker.metadata
        without = backend.image
        b.call(backend.create_topics([NewTopic("late", 1, 1, {})]))
        with_late = backend.image
        b.call(backend.delete_topics(["late"]))
        assert b.broker.replicas.get_partition("late", 0) is None
    finally:
        b.stop()
    b.broker._on_image(without, with_late)  # as the backend would deliver it
    assert b.broker.replicas.get_partition("late", 0) is None


def test_a_connection_arriving_as_the_broker_stops_accepting_is_no_loop_error() -> None:
    """The stop's first step cancels the accept in the loop iteration where the
    listening socket turned readable: the accept must not complete into the cancelled
    future (an "unhandled error on the event loop" before)."""
    b = EmbeddedBroker().start()
    assert b.broker is not None and b._loop is not None
    broker, loop = b.broker, b._loop
    host, port = b.bootstrap.split(":")
    clients: list[socket.socket] = []
    ready = threading.Event()

    def connect_then_stop() -> None:
        # On the loop's thread, so the loop sees neither until the next iteration: the
        # stop's first step is queued ahead of the accept the connection wakes.
        clients.append(socket.create_connection((host, int(port)), timeout=10))
        loop.create_task(broker.stop())
        ready.set()

    loop.call_soon_threadsafe(connect_then_stop)
    assert ready.wait(30)
    try:
        b.call(broker.wait_stopped())
        b.stop()
    finally:
        for client in clients:
            client.close()
    assert b.logged_errors == []
