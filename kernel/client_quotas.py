"""Client quotas as Kafka keeps them (KIP-13, KIP-124, KIP-257, KIP-599, KIP-612): the
entities, the keys each entity takes, Kafka's checks on an alteration and its
DescribeClientQuotas matching (ClientQuotaControlManager, ClientQuotasImage).

The metadata backends store what the handlers checked here; a ``QuotaEntity`` is the
entity's (type, name) pairs sorted by type, a name of None being the type's default.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Iterable, Mapping, Sequence

from kernel.protocol.errors import ErrorCode, KafkaError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

QuotaEntity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for the default) pairs in Kafka's order (the order its
entity maps iterate in, which its answers and messages show): client-id, user, ip."""
_ORDER = {CLIENT_ID: 0, USER: 1, IP: 2}

QuotaValues = Mapping[str, float]

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's QuotaConfigs: the keys of each entity kind and their ConfigDef types.
USER_AND_CLIENT_KEYS: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: "Long",
    CONSUMER_BYTE_RATE: "Long",
    REQUEST_PERCENTAGE: "Double",
    CONTROLLER_MUTATION_RATE: "Double",
}
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: "Int"}

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2  # "any" name of the type, the default included


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    return tuple(sorted(pairs, key=lambda p: (_ORDER.get(p[0], 3), p[0])))


def entity_text(entity: QuotaEntity) -> str:
    """Kafka's ClientQuotaEntity.toString, for messages."""
    inner = ", ".join(f"{t}={n}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _valid_ip_entity(name: str | None) -> bool:
    """InetAddress.getByName: an address, or a host name that resolves."""
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


def checked_entity(names: Mapping[str, str | None]) -> tuple[QuotaEntity, Mapping[str, str]]:
    """The entity (type -> name, as Kafka's request map makes it: a repeated type keeps
    its last name) and the keys it takes, or KafkaError(INVALID_REQUEST) as Kafka's
    validateEntity and configKeysForEntityType answer."""
    if not names:
        raise KafkaError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    for entity_type, name in names.items():
        if entity_type not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise KafkaError(ErrorCode.invalid_request, f"Empty {entity_type} not supported")
    entity = entity_of(names.items())
    if IP in names:
        if len(names) > 1:
            raise KafkaError(ErrorCode.invalid_request, "Invalid quota entity combination, "
                             "IP entity shouldnot be combined with User or ClientId")
        if not _valid_ip_entity(names[IP]):
            raise KafkaError(ErrorCode.invalid_request,
                             f"{names[IP]} is not a valid IP or resolvable host.")
        return entity, IP_KEYS
    return entity, USER_AND_CLIENT_KEYS


# Kafka compares the double with the Java type's largest value, as a double.
_LARGEST = {"Int": ("an INT", float(2**31 - 1)), "Long": ("a LONG", float(2**63 - 1))}


def checked_value(keys: Mapping[str, str], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: a known key, above 0, a whole number within the
    type for Int and Long keys (NaN passes, as in Kafka)."""
    kind = keys.get(key)
    if kind is None:
        raise KafkaError(ErrorCode.invalid_request, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise KafkaError(ErrorCode.invalid_request, f"Quota {key} must be greater than 0")
    if kind == "Double":
        return
    name, largest = _LARGEST[kind]
    if value > largest:
        raise KafkaError(ErrorCode.invalid_request,
                         f"Proposed value for {key} is too large for {name}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise KafkaError(ErrorCode.invalid_request, f"{key} cannot be a fractional value.")


def describe(
    quotas: Mapping[QuotaEntity, QuotaValues],
    components: Sequence[tuple[str, int, str | None]],
    strict: bool,
) -> list[tuple[QuotaEntity, QuotaValues]]:
    """Kafka's ClientQuotasImage.describe: the entities the filter matches, or
    KafkaError (INVALID_REQUEST, UNSUPPORTED_VERSION for an unknown entity type)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise KafkaError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise KafkaError(ErrorCode.invalid_request, f"Entity type {entity_type} cannot "
                             "appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.unsupported_version,
                             f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise KafkaError(ErrorCode.invalid_request, "Request specified "
                                 "MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise KafkaError(ErrorCode.invalid_request, "Request specified "
                                 "MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise KafkaError(ErrorCode.invalid_request, "Request specified "
                                 "MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(entity_type)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and (
            {USER, CLIENT_ID} & (set(exact) | typed)):
        raise KafkaError(ErrorCode.invalid_request, "Invalid entity filter component "
                         "combination. IP filter component should not be used with "
                         "user or clientId filter component.")
    if not exact and not typed:
        return [] if strict else list(quotas.items())
    found = []
    for entity, values in quotas.items():
        names = dict(entity)
        if any(t not in names or names[t] != n for t, n in exact.items()):
            continue
        if any(t not in names for t in typed):
            continue
        if strict and len(names) != len(exact) + len(typed):
            continue
        found.append((entity, values))
    return found
