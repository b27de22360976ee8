"""Spark's own Kafka connector for the installed pyspark, and a SparkSession with it.

The connector (``org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark>``) is not part of
pyspark: Spark resolves it from Maven Central through ``spark.jars.packages`` (Ivy) when
a session starts, into ``spark.jars.ivy``. Its version must be pyspark's and its Scala
suffix the one pyspark's jars were built with, so both are read from the installation.
Nothing here imports pyspark at module level: the broker imports ``spark.options``
without it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_IVY", "PysparkMissing", "build_session", "connector_package", "spark_conf"]

# In the checkout, next to the reference Kafka's jars (git-ignored).
DEFAULT_IVY = Path(__file__).resolve().parent.parent / ".cache" / "ivy"
INSTALL_HINT = "pip install 'kafkernel[spark]'"
_SESSION_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class PysparkMissing(RuntimeError):
    """pyspark is not installed: one line that says how to install it."""


def pyspark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise PysparkMissing(f"pyspark is not installed ({INSTALL_HINT})")
    return Path(spec.origin).parent


def connector_package() -> str:
    """Maven coordinates of Spark's Kafka connector matching the installed pyspark."""
    home = pyspark_home()
    version = importlib.metadata.version("pyspark")
    scala = next((m.group(1) for jar in (home / "jars").glob("scala-library-*.jar")
                  if (m := re.match(r"scala-library-(\d+\.\d+)\.", jar.name))), None)
    if scala is None:
        raise PysparkMissing(f"no scala-library jar in {home / 'jars'}: a broken pyspark")
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}"


def spark_conf(master: str, app_name: str,
               extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The session's configuration: the connector through Ivy, UTC timestamps (a record's
    date is the same on every machine), no UI; ``extra`` wins over all of it."""
    return {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars.packages": connector_package(),
        "spark.jars.ivy": str(DEFAULT_IVY),
        **_SESSION_DEFAULTS,
        **(extra or {}),
    }


def build_session(master: str, app_name: str,
                  extra: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession on ``master`` (``local[2]``, ``spark://host:7077``, ...) with the
    Kafka connector. Under spark-submit the JVM already runs with spark-submit's own
    ``--master`` and ``--packages``: those are left to it."""
    pyspark_home()
    from pyspark.sql import SparkSession

    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # set by spark-submit for its Python
        conf = {"spark.app.name": app_name, **_SESSION_DEFAULTS, **(extra or {})}
    else:
        conf = spark_conf(master, app_name, extra)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
