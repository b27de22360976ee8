"""Build kio entities of any version from one set of keyword arguments.

kio generates one dataclass per (API, version); fields come and go between versions.
Handlers describe a response once and ``make`` keeps only the fields the chosen
version has, so one handler serves every version without per-version branches. A name
that no version of the entity declares is a mistake (a typo would become a default
value on the wire), so it raises.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.static.constants import EntityType

T = TypeVar("T")

_KIO_SCHEMA = "kio.schema."


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@cache
def _versions(api: str) -> tuple[int, ...]:
    package = importlib.import_module(_KIO_SCHEMA + api)
    return tuple(int(info.name[1:]) for info in pkgutil.iter_modules(package.__path__)
                 if info.ispkg and info.name[:1] == "v" and info.name[1:].isdigit())


@cache
def declared_in_some_version(cls: type, name: str) -> bool:
    """Whether a version of ``cls``'s entity declares ``name``: kio keeps an entity of
    version N in ``kio.schema.<api>.v<N>.<request|response|data>`` under one name. The
    newest and the oldest versions are looked at first, then the nearest ones: a field
    a version lacks was mostly added after it (or dropped before it), so the first
    response of a kind imports one or two modules, once. Nearest first took up to six
    for Produce v10 (``topic_id`` is v13's), some 50 ms on the first acks=all write a
    broker leads."""
    if name in field_names(cls):
        return True
    parts = cls.__module__.split(".")
    if cls.__module__.startswith(_KIO_SCHEMA) and len(parts) == 5 and parts[3][1:].isdigit():
        api, own, kind = parts[2], int(parts[3][1:]), parts[4]
        versions = _versions(api)
        ends = (max(versions), min(versions)) if versions else ()
        for version in (*ends, *sorted(set(versions) - set(ends),
                                      key=lambda v: abs(v - own))):
            try:
                module = importlib.import_module(f"{_KIO_SCHEMA}{api}.v{version}.{kind}")
            except ModuleNotFoundError:
                continue
            other = getattr(module, cls.__qualname__, None)
            if isinstance(other, type) and dataclasses.is_dataclass(other) \
                    and name in field_names(other):
                return True
    return False


def make(cls: type[T], /, **values: Any) -> T:
    """Instantiate ``cls`` with the subset of ``values`` that it declares; a name no
    version of the entity declares raises TypeError."""
    names = field_names(cls)
    if values.keys() <= names:
        return cls(**values)
    kept = {}
    for k, v in values.items():
        if k in names:
            kept[k] = v
        elif not declared_in_some_version(cls, k):
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}: no version declares {k}")
    return cls(**kept)


def has_field(cls: type, name: str) -> bool:
    return name in field_names(cls)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module holding the response classes (top level and nested) of a version."""
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def request_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.request)
