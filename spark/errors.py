"""One line for a failed export, from Spark's error: a query's failure is a page of text
(the query's id, Spark's advice, a plan, stack traces), its cause somewhere inside.
Standard library only, as spark/options.py."""

from __future__ import annotations

import re

from spark.options import ExportOptions

__all__ = ["KAFKA_DEFAULTS", "explain"]

# The Kafka source's own client options unless the export sets them: Spark's driver asks
# its admin client for offsets up to fetchOffset.numRetries (3) times, each bounded by
# default.api.timeout.ms (60 s in Kafka, and raised to request.timeout.ms when below it),
# so an unreachable broker fails the export in about a minute rather than three.
KAFKA_DEFAULTS = {"default.api.timeout.ms": "20000", "request.timeout.ms": "20000"}

_QUERY_PREFIX = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
_DATA_LOSS = "Some data may have been lost"
_REASON = re.compile(r"^Reason: (.*?)(?:\s*SQLSTATE: \w+)?$", re.MULTILINE)
_JAVA_PREFIX = re.compile(r"^(?:java\.util\.concurrent\.ExecutionException: )?"
                          r"org\.apache\.kafka\.common\.errors\.")


def _cause(message: str) -> str:
    """Spark's error without its query banner, plan and stack: the first line of what
    the query was terminated with."""
    text = _QUERY_PREFIX.sub("", message.strip())
    first = next((line.strip() for line in text.splitlines() if line.strip()), text)
    return _JAVA_PREFIX.sub("", _SQLSTATE.sub("", first))


def explain(message: str, options: ExportOptions) -> str:
    """What went wrong and, where the cause is known, what to check or set."""
    what = ",".join(options.topics) if options.topics else f"/{options.topic_pattern}/"
    cause = _cause(message)
    if _DATA_LOSS in message:
        reason = _REASON.search(message)
        detail = reason.group(1) if reason else cause
        return (f"data loss: {detail}: those records are gone from Kafka (retention, "
                "DeleteRecords, a deleted or recreated topic); fail.on.data.loss = false "
                "(--no-fail-on-data-loss) skips them")
    if "TimeoutException" in message and ("node assignment" in message
                                          or "listNodes" in message):
        timeout = options.kafka.get("default.api.timeout.ms",
                                    KAFKA_DEFAULTS["default.api.timeout.ms"])
        return (f"no broker answered at {options.bootstrap_servers} "
                f"(kafka default.api.timeout.ms {timeout}): {cause}")
    if "UnknownTopicOrPartitionException" in message:
        return f"topic {what}: no such topic (deleted?): {cause}"
    return cause
