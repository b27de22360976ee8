"""Client quotas on ZooKeeper, where Kafka 3.x keeps them: /config/users/<user>,
/config/clients/<client-id>, /config/users/<user>/clients/<client-id> and
/config/ips/<ip> (names sanitized as Kafka's Sanitizer, "<default>" for a default), each
a config znode whose values are strings (whole numbers for Long and Int keys), and a
/config/changes notification naming the entity path, as AdminZkClient writes them."""

from __future__ import annotations

import math
from collections.abc import Mapping

from kernel.api.cluster import (
    CLIENT_ID,
    IP,
    IP_KEYS,
    USER,
    USER_AND_CLIENT_KEYS,
    QuotaEntity,
    entity_of,
)

from .znodes import DEFAULT_ENTITY, desanitize, sanitize

KEY_TYPES = {**USER_AND_CLIENT_KEYS, **IP_KEYS}


def _znode_name(entity_type: str, name: str | None) -> str:
    if name is None:
        return DEFAULT_ENTITY
    return name if entity_type == IP else sanitize(name)


def entity_name(entity_type: str, znode: str) -> str | None:
    if znode == DEFAULT_ENTITY:
        return None
    return znode if entity_type == IP else desanitize(znode)


def entity_path(entity: QuotaEntity) -> str:
    """The path under /config: users/<u>, clients/<c>, users/<u>/clients/<c>, ips/<ip>."""
    names = dict(entity)
    if USER in names and CLIENT_ID in names:
        return (f"users/{_znode_name(USER, names[USER])}/clients/"
                f"{_znode_name(CLIENT_ID, names[CLIENT_ID])}")
    if USER in names:
        return f"users/{_znode_name(USER, names[USER])}"
    if CLIENT_ID in names:
        return f"clients/{_znode_name(CLIENT_ID, names[CLIENT_ID])}"
    return f"ips/{_znode_name(IP, names[IP])}"


def entity_at(path: str) -> QuotaEntity:
    """entity_path's inverse."""
    parts = path.split("/")
    kinds = {"users": USER, "clients": CLIENT_ID, "ips": IP}
    return entity_of((kinds[parts[i]], entity_name(kinds[parts[i]], parts[i + 1]))
                     for i in range(0, len(parts), 2))


def quota_values(configs: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config znode (a user's also holds SCRAM keys);
    a value that is not a number is left out."""
    values = {}
    for key, text in configs.items():
        if key in KEY_TYPES:
            try:
                values[key] = float(text)
            except ValueError:
                continue
    return values


def quota_text(key: str, value: float) -> str:
    """How Kafka writes the value: a whole number for Long and Int keys."""
    if KEY_TYPES.get(key, "Double") != "Double" and math.isfinite(value):
        return str(int(value))
    return repr(value)
