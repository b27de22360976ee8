"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), with the checks, filters and
messages of Kafka's AclApis and AclControlManager. Versions 1-3, as Kafka 4 serves."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.cluster import AclBinding, MetadataBackend
from kernel.api.errors import InvalidRequest
from kernel.api.handlers import ApiRegistry, RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import response_module
from plugins.acl.codes import (
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    known,
)

__all__ = ["AclFilter", "register"]

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
MIN_VERSION, MAX_VERSION = 1, 3
# AclControlManager.MAX_RECORDS_PER_USER_OP
MAX_RECORDS_PER_USER_OP = 10000
_NO_THROTTLE = datetime.timedelta(0)
_CLUSTER_DENIED = "Cluster authorization failed."


def register(registry: ApiRegistry, metadata: Callable[[], MetadataBackend]) -> None:
    """``metadata`` gives the broker's metadata backend once it has started."""
    registry.register(DESCRIBE_ACLS, lambda ctx, req: describe(metadata(), ctx, req),
                      min_version=MIN_VERSION, max_version=MAX_VERSION)
    registry.register(CREATE_ACLS, lambda ctx, req: create(metadata(), ctx, req),
                      min_version=MIN_VERSION, max_version=MAX_VERSION)
    registry.register(DELETE_ACLS, lambda ctx, req: delete(metadata(), ctx, req),
                      min_version=MIN_VERSION, max_version=MAX_VERSION)


def _refuse_unknown(what: str, *codes: tuple[type[Any], int]) -> None:
    """Kafka's request classes refuse UNKNOWN (or unrecognised) codes while parsing,
    which closes the connection."""
    for enum, code in codes:
        if known(enum, code) == 0:
            raise InvalidRequest(f"{what} contains an unknown {enum.__name__} {code}")


# -- DescribeAcls / DeleteAcls filters ---------------------------------------------


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: a ResourcePatternFilter and an AccessControlEntryFilter."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    @classmethod
    def of(cls, f: Any, what: str) -> AclFilter:
        _refuse_unknown(what, (ResourceType, f.resource_type_filter),
                        (PatternType, f.pattern_type_filter), (AclOperation, f.operation),
                        (AclPermissionType, f.permission_type))
        return cls(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                   f.principal_filter, f.host_filter, f.operation, f.permission_type)

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern == PatternType.ANY or pattern == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: the ACLs that would apply to a resource of this name
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return name == acl.resource_name or acl.resource_name == WILDCARD

    def _matches_entry(self, acl: AclBinding) -> bool:
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and (self.operation == AclOperation.ANY or self.operation == acl.operation)
                and (self.permission_type == AclPermissionType.ANY
                     or self.permission_type == acl.permission_type))


def _sorted(acls: Iterable[AclBinding]) -> list[AclBinding]:
    return sorted(acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type,
                                       a.principal, a.host, a.operation, a.permission_type))


# -- DescribeAcls -------------------------------------------------------------------


def describe(metadata: MetadataBackend, ctx: RequestContext, request: Any) -> Any:
    m = response_module(ctx.api_key, ctx.api_version)
    acl_filter = AclFilter.of(request, "DescribeAclsRequest")
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return m.DescribeAclsResponse(
            throttle_time=_NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
            error_message=_CLUSTER_DENIED, resources=())
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in _sorted(a for a in metadata.acls().values() if acl_filter.matches(a)):
        by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                               []).append(acl)
    return m.DescribeAclsResponse(
        throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        resources=tuple(
            m.DescribeAclsResource(
                resource_type=rtype, resource_name=name, pattern_type=pattern,
                acls=tuple(m.AclDescription(principal=a.principal, host=a.host,
                                            operation=a.operation,
                                            permission_type=a.permission_type)
                           for a in acls))
            for (rtype, name, pattern), acls in by_resource.items()))


# -- CreateAcls ---------------------------------------------------------------------


def _not_a_binding(c: Any) -> bool:
    return (c.resource_type == ResourceType.ANY
            or c.resource_pattern_type in (PatternType.ANY, PatternType.MATCH)
            or c.operation == AclOperation.ANY or c.permission_type == AclPermissionType.ANY)


def _creation_problem(c: Any) -> str | None:
    """AclApis' checks, in Kafka's order (AclControlManager.validateNewAcl's are
    unreachable for the codes a request can carry once _not_a_binding passed)."""
    if c.resource_type == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not c.resource_name:
        return "Invalid empty resource name"
    return None


async def create(metadata: MetadataBackend, ctx: RequestContext, request: Any) -> Any:
    m = response_module(ctx.api_key, ctx.api_version)
    for c in request.creations:
        _refuse_unknown("CreateAclsRequest", (ResourceType, c.resource_type),
                        (PatternType, c.resource_pattern_type), (AclOperation, c.operation),
                        (AclPermissionType, c.permission_type))

    def result(code: ErrorCode = ErrorCode.none, message: str | None = "") -> Any:
        # (Kafka's success carries an empty message, not a null one)
        return m.AclCreationResult(error_code=code, error_message=message)

    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        return m.CreateAclsResponse(throttle_time=_NO_THROTTLE, results=tuple(
            result(ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED)
            for _ in request.creations))
    if any(_not_a_binding(c) for c in request.creations):
        # Kafka cannot even build the binding (ResourcePattern and AccessControlEntry
        # refuse ANY and MATCH): the whole request fails as an unexpected error.
        return m.CreateAclsResponse(throttle_time=_NO_THROTTLE, results=tuple(
            result(ErrorCode.unknown_server_error, None) for _ in request.creations))
    results: list[Any] = []
    valid: list[AclBinding] = []
    for c in request.creations:
        problem = _creation_problem(c)
        if problem is not None:
            results.append(result(ErrorCode.invalid_request, problem))
            continue
        valid.append(AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type,
                                c.principal, c.host, c.operation, c.permission_type))
        results.append(None)
    if valid:
        await metadata.create_acls(valid)
    return m.CreateAclsResponse(throttle_time=_NO_THROTTLE,
                                results=tuple(r or result() for r in results))


# -- DeleteAcls ---------------------------------------------------------------------


async def delete(metadata: MetadataBackend, ctx: RequestContext, request: Any) -> Any:
    m = response_module(ctx.api_key, ctx.api_version)
    filters = [AclFilter.of(f, "DeleteAclsRequest") for f in request.filters]

    def filter_result(code: ErrorCode = ErrorCode.none, message: str | None = None,
                      matching: Iterable[AclBinding] = ()) -> Any:
        return m.DeleteAclsFilterResult(
            error_code=code, error_message=message, matching_acls=tuple(
                m.DeleteAclsMatchingAcl(
                    error_code=ErrorCode.none, error_message=None,
                    resource_type=a.resource_type, resource_name=a.resource_name,
                    pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                    operation=a.operation, permission_type=a.permission_type)
                for a in matching))

    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        return m.DeleteAclsResponse(throttle_time=_NO_THROTTLE, filter_results=tuple(
            filter_result(ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED)
            for _ in filters))
    acls: Mapping[Any, AclBinding] = metadata.acls()
    removed: dict[Any, None] = {}
    results = []
    for f in filters:
        matched = [(acl_id, acl) for acl_id, acl in acls.items() if f.matches(acl)]
        if len(removed.keys() | {acl_id for acl_id, _ in matched}) > MAX_RECORDS_PER_USER_OP:
            results.append(filter_result(
                ErrorCode.invalid_request, "Cannot remove more than "
                f"{MAX_RECORDS_PER_USER_OP} acls in a single delete operation."))
            continue
        removed.update(dict.fromkeys(acl_id for acl_id, _ in matched))
        results.append(filter_result(matching=_sorted(acl for _, acl in matched)))
    if removed:
        await metadata.remove_acls(list(removed))
    return m.DeleteAclsResponse(throttle_time=_NO_THROTTLE, filter_results=tuple(results))
