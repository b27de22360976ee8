"""Fetch Apache Kafka's jars (the version pinned in kafka/pom.xml) with Maven into
``.cache/kafka-<version>/libs``, once: a stamp file holding the pom's hash says the copy is
complete and current, so a second run calls nothing.

    python -m reference.fetch     # prints the libs folder
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version the pom pins (its ``kafka.version`` property)."""
    node = ET.parse(pom).getroot().find("m:properties/m:kafka.version", _NS)
    if node is None or not node.text:
        raise ValueError(f"{pom}: no <kafka.version> property")
    return node.text.strip()


def cache_dir(version: str | None = None) -> Path:
    return REPO / ".cache" / f"kafka-{version or kafka_version()}"


def libs_dir(version: str | None = None) -> Path:
    """Where the jars are (``java -cp 'libs/*'``); complete only if :func:`is_fetched`."""
    return cache_dir(version) / "libs"


def _stamp(version: str | None = None) -> Path:
    return cache_dir(version) / "libs.stamp"


def _pom_hash() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def is_fetched(version: str | None = None) -> bool:
    stamp = _stamp(version)
    return stamp.is_file() and stamp.read_text().strip() == _pom_hash()


def fetch() -> Path:
    """The libs folder, fetched first unless the stamp says it is current."""
    libs = libs_dir()
    if is_fetched():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not installed (Debian package `maven`; ./dev test installs it)")
    # Copy into a fresh folder and rename it into place, so an interrupted run never
    # leaves a partial libs folder behind a stamp.
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    print(f"reference: fetching Apache Kafka {kafka_version()} with Maven", file=sys.stderr)
    subprocess.run(
        [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
         f"-DoutputDirectory={partial}"],
        check=True,
    )
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    _stamp().write_text(_pom_hash() + "\n")
    return libs


def main() -> int:
    try:
        print(fetch())
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"reference: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
