"""Kafkernel's Spark side: Spark's own Kafka connector (``spark-sql-kafka-0-10``) reads
and writes Kafkernel topics unchanged; this package holds what runs it.

- ``session``: the connector's Maven coordinates for the installed pyspark, resolved
  through Spark's ``spark.jars.packages`` into an Ivy cache, and a SparkSession built on
  them; ``python -m spark.fetch`` resolves them once (``./dev test`` does).
- ``options``: one export's options (stdlib only, so the broker's ``spark_sink`` plugin
  validates them without pyspark), as a TOML table or as command-line arguments.
- ``export``: the export job, a Structured Streaming query from Kafka topics to Parquet
  with a checkpoint (``python -m spark.export`` or ``spark-submit spark/export.py``).
- ``progress``: what an export has written, read from its checkpoint.
"""
