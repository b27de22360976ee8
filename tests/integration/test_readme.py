"""The README's quick start and plugin section, done as a new user does them: the
installed ``kafkernel`` command, run from the checkout, on ``kafkernel.toml`` edited as
the README says."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAFKERNEL = Path(sys.executable).with_name("kafkernel")  # the console script, as installed
PLUGIN = "tests.plugin_fixtures.hello_plugin:HelloPlugin"
STARTED_TIMEOUT_S = 60


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _plugin_config(tmp_path: Path) -> Path:
    """kafkernel.toml with its [plugins] table replaced by the README's block."""
    section = _readme().split("Enable it in `kafkernel.toml`", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None, "the README lost its plugin configuration block"
    base = (ROOT / "kafkernel.toml").read_text()
    cfg = tmp_path / "kafkernel.toml"
    cfg.write_text(base[:base.index("[plugins]")] + block.group(1))
    return cfg


@pytest.fixture
def kafkernel() -> Path:
    if not KAFKERNEL.exists():
        pytest.skip("the kafkernel console script is not installed next to this Python")
    return KAFKERNEL


def test_readme_plugin_config_checks_from_the_checkout(kafkernel: Path, tmp_path: Path,
                                                      ) -> None:
    cfg = _plugin_config(tmp_path)
    result = subprocess.run([str(kafkernel), "config", "check", str(cfg)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{cfg}: ok"


def test_readme_plugin_serves_from_the_checkout(kafkernel: Path, tmp_path: Path) -> None:
    cfg = _plugin_config(tmp_path)
    proc = subprocess.Popen(
        [str(kafkernel), "serve", "--config", str(cfg),
         "--override", 'listeners="PLAINTEXT://127.0.0.1:0"', "--override", "metrics.port=0",
         "--override", f'log.dirs="{tmp_path / "data"}"'],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "broker started" in line or "Traceback" in line:
                break
        assert "broker started" in lines[-1], "".join(lines)
        assert PLUGIN in lines[-1]
    finally:
        proc.send_signal(signal.SIGTERM)
        # The rest through the same buffer: communicate() would skip what the loop above
        # had already read ahead.
        proc.wait(timeout=STARTED_TIMEOUT_S)
        err = "".join(lines) + proc.stderr.read()
    assert proc.returncode == 0, err
    assert "error" not in err


def test_dev_serve_installs_only_what_serving_needs() -> None:
    """./dev serve needs neither the test extra nor kcat, ZooKeeper or Java: of Debian's
    packages only what builds the C extensions; of the extras uvloop and the admin
    commands' clients."""
    dev = (ROOT / "dev").read_text()
    serve = dev.split("\n  serve)\n", 1)[1].split(";;", 1)[0]
    assert "setup_python fast,admin\n" in serve
    for unneeded in ("test", "kcat", "zookeeper", "java"):
        assert unneeded not in serve, unneeded
    assert [line.strip() for line in serve.splitlines() if "apt_install" in line] == [
        "apt_install $(c_build_packages)"]
    assert "exec .venv/bin/kafkernel serve --config kafkernel.toml" in serve


def test_readme_says_where_kafkernel_is() -> None:
    assert "`kafkernel` command used below is installed in `.venv/bin`" in _readme()
