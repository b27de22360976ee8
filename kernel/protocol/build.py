"""Build kio entities of any version from one set of keyword arguments.

kio generates one dataclass per (API, version); fields come and go between versions.
Handlers describe a response once and ``make`` keeps only the fields the chosen
version has, so one handler serves every version without per-version branches.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.static.constants import EntityType

T = TypeVar("T")


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type[T], /, **values: Any) -> T:
    """Instantiate ``cls`` with the subset of ``values`` that it declares."""
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in field_names(cls)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module holding the response classes (top level and nested) of a version."""
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def request_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.request)
