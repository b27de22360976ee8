"""plugins/metadata_kraft/records/schema.py against Kafka's own metadata record schemas
(``common/metadata/*.json`` in the cached kafka-metadata jar), field by field: names,
types, versions, nullable and tagged versions, tags, defaults, nested structs; and every
record type of the jar is in our table. Skips when ``.cache`` has no jar."""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

from plugins.metadata_kraft.records import schema
from plugins.metadata_kraft.records.schema import METADATA_RECORDS, Message, parse_versions
from reference.fetch import kafka_version, libs_dir

JAR = libs_dir() / f"kafka-metadata-{kafka_version()}.jar"
# Keys of a field we model; "about" and "entityType" carry nothing the codec uses,
# "mapKey" only builds a Java map of an array.
KNOWN_FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "taggedVersions", "tag",
                    "default", "fields", "about", "entityType", "mapKey"}


def _jar_schemas() -> dict[str, dict[str, Any]]:
    if not JAR.is_file():
        pytest.skip(f"no {JAR.name} in .cache (python -m reference.fetch fetches it)")
    found = {}
    with zipfile.ZipFile(JAR) as jar:
        for name in jar.namelist():
            if name.startswith("common/metadata/") and name.endswith(".json"):
                text = jar.read(name).decode()
                # Kafka's schema files carry // comments, which JSON does not
                body = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE))
                found[body["name"]] = body
    return found


@pytest.fixture(scope="module")
def jar_schemas() -> dict[str, dict[str, Any]]:
    return _jar_schemas()


def _default(field: dict[str, Any]) -> Any:
    """Kafka's default of a schema field as a Python value."""
    kind, text = field["type"], field.get("default")
    if text == "null":
        return None
    if kind.startswith("[]"):
        return ()
    if text is None:
        return {"bool": False, "float64": 0.0, "string": "", "bytes": b"",
                "uuid": schema.ZERO_UUID}.get(kind, 0)
    if kind == "bool":
        return text == "true"
    if kind == "uuid":
        return uuid.UUID(text)
    if kind == "float64":
        return float(text)
    if kind == "string":
        return text
    return int(text, 0)


def _compare(cls: type[Message], fields: list[dict[str, Any]], where: str) -> Iterator[str]:
    ours = schema.kafka_fields(cls)
    names = [f["name"] for f in fields]
    if [spec.name for _, spec in ours] != names:
        yield f"{where}: fields {[s.name for _, s in ours]} != Kafka's {names}"
        return
    for (attr, spec), field in zip(ours, fields, strict=True):
        at = f"{where}.{field['name']}"
        unknown = set(field) - KNOWN_FIELD_KEYS
        if unknown:
            yield f"{at}: schema keys {sorted(unknown)} are not modelled"
        for what, mine, kafkas in (
            ("type", spec.type, field["type"]),
            ("versions", parse_versions(spec.versions), parse_versions(field["versions"])),
            ("nullableVersions", parse_versions(spec.nullable),
             parse_versions(field.get("nullableVersions"))),
            ("taggedVersions", parse_versions(spec.tagged),
             parse_versions(field.get("taggedVersions"))),
            ("tag", spec.tag, field.get("tag")),
            ("default", cls.__dataclass_fields__[attr].default, _default(field)),
        ):
            if mine != kafkas:
                yield f"{at}: {what} {mine!r} != Kafka's {kafkas!r}"
        if "fields" in field:
            if spec.struct is None:
                yield f"{at}: Kafka's struct has no struct type here"
            else:
                yield from _compare(spec.struct, field["fields"], at)
        elif spec.struct is not None:
            yield f"{at}: a struct here, not in Kafka's schema"


def test_every_record_type_of_the_jar_is_in_the_table(
        jar_schemas: dict[str, dict[str, Any]]) -> None:
    ours = {cls.__name__: cls.API_KEY for cls in METADATA_RECORDS.values()}
    theirs = {name: body["apiKey"] for name, body in jar_schemas.items()}
    assert ours == theirs


def test_each_record_matches_kafka_field_by_field(
        jar_schemas: dict[str, dict[str, Any]]) -> None:
    problems: list[str] = []
    for cls in METADATA_RECORDS.values():
        body = jar_schemas[cls.__name__]
        assert body["type"] == "metadata"
        if parse_versions(body["validVersions"]) != cls.VERSIONS:
            problems.append(f"{cls.__name__}: versions {cls.VERSIONS} != Kafka's "
                            f"{body['validVersions']}")
        # the codec writes every version flexible
        if parse_versions(body["flexibleVersions"])[0] > cls.VERSIONS[0]:
            problems.append(f"{cls.__name__}: not flexible in every version")
        problems.extend(_compare(cls, body["fields"], cls.__name__))
    assert not problems, "\n".join(problems)
