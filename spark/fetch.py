"""Resolve Spark's Kafka connector into the Ivy cache (``.cache/ivy``, git-ignored) once,
as Spark itself does at session start: a stamp naming the coordinates says it was done,
so a second run starts no JVM. ``./dev test`` runs it before the tests.

    python -m spark.fetch     # prints the connector's coordinates
"""

from __future__ import annotations

import sys
from pathlib import Path

from spark.session import DEFAULT_IVY, PysparkMissing, build_session, connector_package

__all__ = ["fetch", "is_fetched"]


def _stamp(package: str) -> Path:
    return DEFAULT_IVY / (package.replace(":", "_") + ".resolved")


def is_fetched(package: str | None = None) -> bool:
    return _stamp(package or connector_package()).is_file()


def fetch() -> str:
    """The connector's coordinates, resolved first unless the stamp says so."""
    package = connector_package()
    if is_fetched(package):
        return package
    print(f"spark: resolving {package} through spark.jars.packages", file=sys.stderr)
    # Spark resolves spark.jars.packages when its JVM starts; a session in local mode is
    # the way to have exactly its resolution (Ivy settings, exclusions) done.
    session = build_session("local[1]", "kafkernel-fetch")
    try:
        session.sparkContext.setLogLevel("ERROR")
    finally:
        session.stop()
    DEFAULT_IVY.mkdir(parents=True, exist_ok=True)
    _stamp(package).write_text(package + "\n")
    return package


def main() -> int:
    try:
        print(fetch())
    except PysparkMissing as e:
        print(f"spark: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # the JVM's failure: unresolved dependency, no Java
        print(f"spark: resolving the Kafka connector failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
