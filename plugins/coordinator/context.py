"""What the group coordinator's managers need from a request, and the checks every
group API makes first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from kio.schema.errors import ErrorCode

__all__ = ["NO_THROTTLE", "RequestContext", "group_status_error"]

NO_THROTTLE = timedelta(0)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the shard needs from the request header and the connection."""

    client_id: str
    client_host: str
    api_version: int
    """The version the client sent; some behaviour changed across versions."""


def group_status_error(group_id: str, *, loaded: bool,
                       allow_empty_group_id: bool) -> ErrorCode | None:
    """OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept "" for old clients;
    the group management APIs need a real group id. Nothing is served before the
    partition is loaded."""
    if not group_id and not allow_empty_group_id:
        return ErrorCode.invalid_group_id
    if not loaded:
        return ErrorCode.coordinator_load_in_progress
    return None
