"""ApiVersions (key 18): generated from the routing table of the listener the request
came on, so the broker advertises exactly the APIs and versions that listener serves,
except where a route advertises a lower minimum as Kafka does (Produce: see
produce.ADVERTISED_MIN_VERSION). v3+ add the feature levels (KIP-584) as Kafka's
DefaultApiVersionManager: the backend's supported ranges (its ``supported_features()``,
none without one), the image's finalized levels and its offset as the epoch."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.cluster import MetadataBackend
from kernel.protocol.build import make, response_module
from kernel.protocol.codec import encode_response
from kernel.requests import BROKER, CONTROLLER, RequestContext
from kernel.services import ServedApi

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4
LISTENERS = (BROKER, CONTROLLER)

# KIP-511: client software name and version must match this pattern.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _api_keys(module: Any, registry: Iterable[ServedApi],
              only: int | None = None) -> tuple[Any, ...]:
    return tuple(
        module.ApiVersion(api_key=r.api_key,
                          min_version=r.advertised_min_version,
                          max_version=r.max_version)
        for r in registry if only is None or r.api_key == only
    )


def _features(m: Any, metadata: MetadataBackend, api_version: int) -> dict[str, Any]:
    supported = getattr(metadata, "supported_features", None)
    ranges: Mapping[str, tuple[int, int]] = supported() if supported is not None else {}
    image = metadata.image
    return {
        # Below v4 a feature whose minimum is 0 is left out: older clients fail to
        # read it (KAFKA-17492, ApiVersionsResponse.maybeFilterSupportedFeatureKeys).
        "supported_features": tuple(
            m.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high) in ranges.items() if api_version >= 4 or low > 0),
        "finalized_features": tuple(
            m.FinalizedFeatureKey(name=name, max_version_level=level,
                                  min_version_level=level)
            for name, level in image.finalized_features.items() if level > 0),
        "finalized_features_epoch": image.metadata_offset,
        "zk_migration_ready": False,
    }


def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    error = ErrorCode.none
    name = getattr(request, "client_software_name", None)
    version = getattr(request, "client_software_version", None)
    if ctx.api_version >= 3:
        if not (name and _SOFTWARE.match(name) and version and _SOFTWARE.match(version)):
            error = ErrorCode.invalid_request
        else:
            ctx.session.client_software_name = name
            ctx.session.client_software_version = version
    features: dict[str, Any] = {}
    if ctx.api_version >= 3 and error == ErrorCode.none:
        try:
            metadata = ctx.services.metadata
        except RuntimeError:  # no backend yet: no features, epoch -1
            pass
        else:
            features = _features(m, metadata, ctx.api_version)
    return make(
        m.ApiVersionsResponse,
        **features,
        error_code=error,
        # Kafka lists no API with INVALID_REQUEST (ApiVersionsRequest.getErrorResponse).
        api_keys=(_api_keys(m, ctx.services.routes_for(ctx.session.listener_name))
                  if error == ErrorCode.none else ()),
        throttle_time=datetime.timedelta(0),
    )


def unsupported_version_response(correlation_id: int, registry: Iterable[ServedApi]) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know: a v0 body with
    UNSUPPORTED_VERSION and ApiVersions' own range only, so the client can retry lower
    (ApiVersionsRequest.getErrorResponse)."""
    m = response_module(API_KEY, 0)
    body = m.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=_api_keys(m, registry, only=API_KEY),
    )
    return encode_response(API_KEY, 0, correlation_id, body)
