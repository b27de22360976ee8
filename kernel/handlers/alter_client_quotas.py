"""AlterClientQuotas (key 49): set and remove quota keys of user, client-id,
user+client-id and ip entities, their defaults included (a null name), checked as
Kafka's ClientQuotaControlManager checks them and stored through the metadata backend
in one change. As in Kafka, an entity named twice is answered once, with an error, and
what its first alteration set is kept."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.client_quotas import QuotaEntity, checked_entity, checked_value, entity_of, entity_text
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1

Outcome = tuple[ErrorCode, str | None]


async def handle(ctx: RequestContext, request: Any) -> Any:
    results: dict[QuotaEntity, Outcome] = {}
    if not ctx.authorize(ctx.session, "ALTER_CONFIGS", "CLUSTER", CLUSTER_NAME):
        for entry in request.entries:
            key = entity_of({e.entity_type: e.entity_name for e in entry.entity}.items())
            results[key] = (ErrorCode.cluster_authorization_failed, None)
    else:
        changes = _checked_changes(ctx, request, results)
        if changes and not request.validate_only:
            try:
                await ctx.services.metadata.alter_client_quotas(changes)
            except KafkaError as e:
                for key in results:
                    results[key] = (e.error_code, e.message)
    m = response_module(API_KEY, ctx.api_version)
    entries = tuple(
        make(m.EntryData, error_code=error, error_message=message,
             entity=tuple(make(m.EntityData, entity_type=t, entity_name=n) for t, n in key))
        for key, (error, message) in results.items())
    return make(m.AlterClientQuotasResponse, throttle_time=datetime.timedelta(0),
                entries=entries)


def _checked_changes(ctx: RequestContext, request: Any, results: dict[QuotaEntity, Outcome],
                     ) -> dict[QuotaEntity, dict[str, float | None]]:
    """Each entry checked as Kafka's alterClientQuotas does; what would change (unchanged
    values and removals of absent keys write nothing)."""
    current = ctx.services.metadata.client_quotas()
    changes: dict[QuotaEntity, dict[str, float | None]] = {}
    for entry in request.entries:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        key = entity_of(names.items())
        alterations: dict[str, float | None] = {}
        for op in entry.ops:
            if op.key in alterations:
                results[key] = (ErrorCode.invalid_request, f"Duplicate quota key {op.key} "
                                f"not updating quota for this entity {entity_text(key)}")
            else:
                alterations[op.key] = None if op.remove else op.value
        if key in results:
            results[key] = (ErrorCode.invalid_request,
                            f"Ignoring duplicate entity {entity_text(key)}")
            continue
        try:
            entity, keys = checked_entity(names)
            for name, value in alterations.items():
                if value is not None:
                    checked_value(keys, name, value)
        except KafkaError as e:
            results[key] = (e.error_code, e.message)
            continue
        stored = current.get(entity, {})
        change = {name: value for name, value in alterations.items()
                  if ((name in stored) if value is None else stored.get(name) != value)}
        if change:
            changes[entity] = change
        results[key] = (ErrorCode.none, None)
    return changes
