"""The Raft RPCs at every version Kafka 4.3.1's controller listener serves, translated to
and from the one version the core reads and writes (``messages``: Vote v2,
BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1, DescribeQuorum v2).

A request of any served version is rebuilt as the core's version: fields both versions
have are copied (nested entities too), fields only the newer one has take kio's defaults
or the value Kafka's older readers assume (``_FILL``), and the few that were renamed or
moved are carried over (before v15 Fetch has the replica id top level; EndQuorumEpoch v0
lists successor ids). Fetch before v13 names topics, not ids: Kafka's Raft client finds no
topic id in it (the zero Uuid) and answers INVALID_REQUEST with no topics (checked on
4.3.1, v4, v11 and v12), and so does the core.
A response is rebuilt the other way, at the request's version: what the older version
cannot say is left out, as Kafka's serializer leaves it out.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

from kio.schema.types import BrokerId, TopicName

from kernel.api.protocol import request_module, response_module

from .messages import METADATA_TOPIC, METADATA_TOPIC_ID

__all__ = ["CORE_VERSIONS", "SERVED", "to_core", "to_version"]

# api key -> (min, max) served on the controller listener (Kafka 4.3.1's ApiVersions).
SERVED = {52: (0, 2), 53: (0, 1), 54: (0, 1), 1: (4, 18), 55: (0, 2), 59: (0, 1)}
# api key -> the version of ``messages`` the core speaks.
CORE_VERSIONS = {52: 2, 53: 1, 54: 1, 1: 17, 55: 2, 59: 1}

_NO_TOPIC_ID = uuid.UUID(int=0)




def _topic_name(source: Any) -> TopicName:
    return TopicName(METADATA_TOPIC if source.topic_id == METADATA_TOPIC_ID else "")


def _replica_state(source: Any, module: ModuleType) -> Any:
    return module.ReplicaState(replica_id=BrokerId(getattr(source, "replica_id", -1)))


def _preferred_candidates(source: Any, module: ModuleType) -> Any:
    return tuple(module.ReplicaInfo(candidate_id=BrokerId(c), candidate_directory_id=None)
                 for c in getattr(source, "preferred_successors", ()))


def _preferred_successors(source: Any, module: ModuleType) -> Any:
    return tuple(BrokerId(c.candidate_id) for c in getattr(source, "preferred_candidates", ()))


# (class name, field) -> its value from the source entity, where the source version lacks
# the field under that name and kio has no default.
_FILL: dict[tuple[str, str], Callable[[Any, ModuleType], Any]] = {
    ("FetchTopic", "topic_id"): lambda s, _: _NO_TOPIC_ID,
    ("FetchableTopicResponse", "topic"): lambda s, _: _topic_name(s),
    ("FetchRequest", "replica_state"): _replica_state,
    ("FetchRequest", "forgotten_topics_data"): lambda s, _: (),
    ("PartitionData", "replica_directory_id"): lambda s, _: None,
    ("PartitionData", "voter_directory_id"): lambda s, _: None,
    ("PartitionData", "pre_vote"): lambda s, _: False,
    ("PartitionData", "preferred_candidates"): _preferred_candidates,
    ("PartitionData", "preferred_successors"): _preferred_successors,
    ("BeginQuorumEpochRequest", "leader_endpoints"): lambda s, _: (),
    ("EndQuorumEpochRequest", "leader_endpoints"): lambda s, _: (),
}


@cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _convert(value: Any, module: ModuleType) -> Any:
    if isinstance(value, tuple):
        return tuple(_convert(v, module) for v in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    cls = getattr(module, type(value).__name__)
    source_names = {f.name for f in _fields(type(value))}
    values: dict[str, Any] = {}
    for f in _fields(cls):
        fill = _FILL.get((cls.__name__, f.name))
        if f.name in source_names:
            values[f.name] = _convert(getattr(value, f.name), module)
        elif fill is not None:
            values[f.name] = fill(value, module)
        elif not _has_default(f):
            raise TypeError(f"{cls.__module__}.{cls.__name__}.{f.name} has no value")
    return cls(**values)


def to_core(request: Any) -> Any:
    """``request`` as the version the core reads (itself when it already is)."""
    api_key, version = int(request.__api_key__), int(request.__version__)
    core = CORE_VERSIONS[api_key]
    if version == core:
        return request
    return _convert(request, request_module(api_key, core))


def to_version(response: Any, version: int) -> Any:
    """The core's ``response`` at the request's ``version``."""
    if int(response.__version__) == version:
        return response
    return _convert(response, response_module(int(response.__api_key__), version))
