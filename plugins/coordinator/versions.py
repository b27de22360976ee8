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
from collections.abc import Callable
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
    for name, convert, required in _fields(target):
        if not hasattr(entity, name):
            if required:
                raise TypeError(
                    f"{type(entity).__name__} has no {name!r}, which {target.__name__} needs"
                )
            continue
        kwargs[name] = convert(getattr(entity, name))
    return cast(E, target(**kwargs))


@functools.cache
def _fields(target: type) -> tuple[tuple[str, Callable[[object], object], bool], ...]:
    """(name, converter, required) of each field; resolving hints is the costly part,
    and kio's classes are fixed, so it is done once per class (an answer of 100,000
    partitions converts each)."""
    if not dataclasses.is_dataclass(target):
        raise TypeError(f"{target!r} is not a kio entity class")
    hints = typing.get_type_hints(target)
    return tuple(
        (f.name, _converter(hints[f.name]),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(target)
    )


_NOT_NULLABLE = object()


@functools.cache
def _converter(hint: Any) -> Callable[[object], object]:
    """A value of a field typed ``hint``: nested entities (alone or in a tuple) moved to
    the hint's class, the first option that fits winning; None made what ``hint`` takes."""
    options = _union_members(hint)
    null: object = _NOT_NULLABLE
    if type(None) in options:
        null = None
    elif str in options or any(_is_str_like(o) for o in options):
        null = ""
    elif bytes in options:
        null = b""
    nested: list[tuple[bool, type[Any]]] = []  # (a tuple of them, the class)
    for option in options:
        if dataclasses.is_dataclass(option):
            nested.append((False, cast(type[Any], option)))
        elif typing.get_origin(option) is tuple:
            args = typing.get_args(option)
            if args and dataclasses.is_dataclass(args[0]):
                nested.append((True, cast(type[Any], args[0])))

    def convert(value: object) -> object:
        if value is None:
            if null is _NOT_NULLABLE:
                raise TypeError(f"null where {hint!r} is not nullable")
            return null
        for many, cls in nested:
            if not many and dataclasses.is_dataclass(value):
                return to_version(value, cls)
            if many and isinstance(value, tuple):
                return tuple(to_version(v, cls) for v in value)
        return value

    return convert


def _union_members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _is_str_like(option: Any) -> bool:
    return isinstance(option, type) and issubclass(option, str)
