"""DescribeClientQuotas (key 48): the quota entities a filter matches, with their
values, from the metadata backend (Kafka's ClientQuotasImage.describe)."""

from __future__ import annotations

import datetime
from typing import Any

from kernel.client_quotas import describe
from kernel.hookspecs import CLUSTER_NAME
from kernel.protocol.build import make, response_module
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import RequestContext

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)

    def answer(error: ErrorCode, message: str | None, entries: Any) -> Any:
        return make(m.DescribeClientQuotasResponse, throttle_time=datetime.timedelta(0),
                    error_code=error, error_message=message, entries=entries)

    if not ctx.authorize(ctx.session, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER_NAME):
        error = ErrorCode.cluster_authorization_failed
        return answer(error, "Cluster authorization failed.", None)
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        found = describe(ctx.services.metadata.client_quotas(), components, request.strict)
    except KafkaError as e:
        return answer(e.error_code, e.message, None)
    entries = tuple(
        make(m.EntryData,
             entity=tuple(make(m.EntityData, entity_type=t, entity_name=n) for t, n in entity),
             values=tuple(make(m.ValueData, key=k, value=v) for k, v in values.items()))
        for entity, values in found)
    # Kafka answers an empty message, not null, when all is well.
    return answer(ErrorCode.none, "", entries)
