"""Hypothesis strategies over kio's request entities, for the guard's tests and the fuzzer."""

from __future__ import annotations

from functools import cache
from typing import Any

import hypothesis.strategies as st
from kio.index import UnknownEntity, load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.primitive import Records


@cache
def request_classes() -> tuple[type, ...]:
    """Every request schema kio has: each API key at each of its versions."""
    classes = []
    for api_key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            try:
                classes.append(load_request_schema(api_key, version))
            except UnknownEntity:
                continue  # a version with a response schema only
    return tuple(classes)


def requests(classes: tuple[type, ...] | None = None,
             records: st.SearchStrategy[bytes] | None = None) -> st.SearchStrategy[Any]:
    """A request entity of any (or one of the given) schemas, every field drawn, nulls
    included where the schema allows them."""
    st.register_type_strategy(Records, st.binary(max_size=64) if records is None else records)
    return st.sampled_from(classes or request_classes()).flatmap(st.from_type)
