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
def entity_field_names(cls: type) -> frozenset[str]:
    """The fields of ``cls`` in every version kio has of it: kio keeps an entity of
    version N in ``kio.schema.<api>.v<N>.<request|response|data>`` under one name."""
    names = set(field_names(cls))
    module = cls.__module__
    if module.startswith(_KIO_SCHEMA):
        api, _, kind = module[len(_KIO_SCHEMA):].partition(".")
        kind = kind.partition(".")[2]  # drop the "v<N>" of the class's own version
        package = importlib.import_module(_KIO_SCHEMA + api)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.ispkg or not info.name.startswith("v"):
                continue
            try:
                other = importlib.import_module(f"{_KIO_SCHEMA}{api}.{info.name}.{kind}")
            except ModuleNotFoundError:
                continue
            same = getattr(other, cls.__qualname__, None)
            if same is not None and dataclasses.is_dataclass(same):
                names.update(field_names(same))  # type: ignore[arg-type]
    return frozenset(names)


def make(cls: type[T], /, **values: Any) -> T:
    """Instantiate ``cls`` with the subset of ``values`` that it declares; a name no
    version of the entity declares raises TypeError."""
    names = field_names(cls)
    if values.keys() <= names:
        return cls(**values)
    unknown = values.keys() - entity_field_names(cls)
    if unknown:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__}: no version declares "
            f"{', '.join(sorted(unknown))}"
        )
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
