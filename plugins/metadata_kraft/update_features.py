"""UpdateFeatures (key 57), served on the broker and controller listeners as Kafka's
are, by the single node's controller (``KRaftMetadataBackend.update_features``)."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kernel.api.errors import ErrorCode, KafkaError
from kernel.api.handlers import BROKER, CONTROLLER, RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import make, response_module

from .features import FAILED_PREFIX, UpgradeType

API_KEY = 57
MIN_VERSION = 0
MAX_VERSION = 2
LISTENERS = (BROKER, CONTROLLER)

UpdateFeatures = Callable[[Mapping[str, tuple[int, int]], bool], Awaitable[None]]


async def handle(update: UpdateFeatures, ctx: RequestContext, request: Any) -> Any:
    """Kafka's answer: one top-level error, prefixed as QuorumController does; v0-1 list
    each feature, on success only. v0's AllowDowngrade is ignored, as Kafka 4.3.1 does
    (every v0 update is an upgrade)."""
    m = response_module(API_KEY, ctx.api_version)
    error, message = ErrorCode.none, None
    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        error, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    else:
        updates = {u.feature: (u.max_version_level,
                               getattr(u, "upgrade_type", UpgradeType.UPGRADE))
                   for u in request.feature_updates}
        try:
            await update(updates, getattr(request, "validate_only", False))
        except KafkaError as e:
            error, message = e.error_code, FAILED_PREFIX + (e.message or "")
    fields: dict[str, Any] = {}
    if ctx.api_version <= 1:
        fields["results"] = () if error != ErrorCode.none else tuple(
            m.UpdatableFeatureResult(feature=u.feature, error_code=ErrorCode.none,
                                     error_message="NONE")
            for u in request.feature_updates)
    return make(m.UpdateFeaturesResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message, **fields)
