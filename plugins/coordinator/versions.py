"""Move kio entities between versions of one API by field name.

The shard speaks one version per API (the newest that names topics); clients speak any
supported version. kio generates one class per version, but field names are stable
across versions, so a request can be lifted to the shard's version (fields it lacks take
the newer class's defaults, e.g. JoinGroup v0's rebalance_timeout becomes -1, which the
shard reads as "use the session timeout") and a response lowered to the client's version
(fields the older class lacks are dropped). Structural changes are not covered and stay
with the handler: LeaveGroup v0-v2 (one member at top level), OffsetFetch v0-v7 (one
group at top level), OffsetCommit/OffsetFetch v10 (topic ids instead of names).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar, cast

__all__ = ["to_version"]

E = TypeVar("E")


def to_version(entity: object, target: type[E]) -> E:
    """Build ``target`` from the same-named fields of ``entity``, recursing into nested
    entities. A None where ``target`` does not allow null becomes "" or b"" (what Kafka
    sends to versions whose field is not nullable, e.g. JoinGroup protocol_name < v7)."""
    if type(entity) is target:
        return entity  # frozen: nothing to copy
    kwargs: dict[str, Any] = {}
    for name, hint, required in _fields(target):
        if not hasattr(entity, name):
            if required:
                raise TypeError(
                    f"{type(entity).__name__} has no {name!r}, which {target.__name__} needs"
                )
            continue
        kwargs[name] = _convert(getattr(entity, name), hint)
    return cast(E, target(**kwargs))


@functools.cache
def _fields(target: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type hint, required) of each field; resolving hints is the costly part, and
    kio's classes are fixed, so it is done once per class."""
    if not dataclasses.is_dataclass(target):
        raise TypeError(f"{target!r} is not a kio entity class")
    hints = typing.get_type_hints(target)
    return tuple(
        (f.name, hints[f.name],
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(target)
    )


def _convert(value: object, hint: Any) -> object:
    options = _union_members(hint)
    if value is None:
        if type(None) in options:
            return None
        if str in options or any(_is_str_like(o) for o in options):
            return ""
        if bytes in options:
            return b""
        raise TypeError(f"null where {hint!r} is not nullable")
    for option in options:
        if dataclasses.is_dataclass(option) and dataclasses.is_dataclass(value):
            return to_version(value, cast(type[Any], option))
        if typing.get_origin(option) is tuple and isinstance(value, tuple):
            args = typing.get_args(option)
            if args and dataclasses.is_dataclass(args[0]):
                item = cast(type[Any], args[0])
                return tuple(to_version(v, item) for v in value)
    return value


def _union_members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _is_str_like(option: Any) -> bool:
    return isinstance(option, type) and issubclass(option, str)
