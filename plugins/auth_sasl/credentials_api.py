"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), with the checks
and messages of Kafka's ScramControlManager and ScramImage."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.handlers import ApiRegistry, RequestContext
from kernel.api.hooks import CLUSTER_NAME
from kernel.api.protocol import make, response_module
from plugins.auth_sasl.credentials import ScramCredentials, StoredCredential
from plugins.auth_sasl.scram import MECHANISMS, ScramMechanism

__all__ = ["register"]

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
# ScramControlManager.MAX_ITERATIONS
MAX_ITERATIONS = 16384
_BY_TYPE = {m.kafka_type: m for m in MECHANISMS.values()}
_TWICE = "A user credential cannot be altered twice in the same request"
_NO_THROTTLE = datetime.timedelta(0)


def register(registry: ApiRegistry, credentials: Callable[[], ScramCredentials]) -> None:
    """``credentials`` gives the broker's credentials once it has started."""
    registry.register(DESCRIBE_USER_SCRAM_CREDENTIALS,
                      lambda ctx, req: describe(credentials(), ctx, req),
                      min_version=0, max_version=0)
    registry.register(ALTER_USER_SCRAM_CREDENTIALS,
                      lambda ctx, req: alter(credentials(), ctx, req),
                      min_version=0, max_version=0)


def _check(name: str, mechanism_type: int) -> tuple[ErrorCode, str] | ScramMechanism:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mechanism = _BY_TYPE.get(mechanism_type)
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return mechanism


async def alter(credentials: ScramCredentials, ctx: RequestContext, request: Any) -> Any:
    m = response_module(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)

    def result(user: str, code: ErrorCode, message: str | None) -> Any:
        return m.AlterUserScramCredentialsResult(user=user, error_code=code,
                                                 error_message=message)

    if not ctx.authorize(ctx.session, "ALTER", "CLUSTER", CLUSTER_NAME):
        users = dict.fromkeys(x.name for x in (*request.deletions, *request.upsertions))
        return m.AlterUserScramCredentialsResponse(throttle_time=_NO_THROTTLE, results=tuple(
            result(u, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
            for u in users))
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, ScramMechanism] = {}
    upsertions: dict[str, tuple[ScramMechanism, Any]] = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        checked = _check(d.name, d.mechanism)
        if isinstance(checked, tuple):
            errors[d.name] = checked
        elif not credentials.exists(d.name, checked.kafka_type):
            errors[d.name] = (ErrorCode.resource_not_found,
                              "Attempt to delete a user credential that does not exist")
        else:
            deletions[d.name] = checked
    for u in request.upsertions:
        if u.name in errors:
            continue
        if (deletions.pop(u.name, None) is not None
                or upsertions.pop(u.name, None) is not None):
            errors[u.name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        checked = _check(u.name, u.mechanism)
        if isinstance(checked, tuple):
            errors[u.name] = checked
        elif u.iterations < checked.min_iterations:
            errors[u.name] = (ErrorCode.unacceptable_credential, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.unacceptable_credential, "Too many iterations")
        else:
            upsertions[u.name] = (checked, u)
    # One metadata change for the whole request, as Kafka's controller result is atomic.
    await credentials.alter(
        [StoredCredential(name, mechanism.kafka_type, u.salt,
                          *mechanism.keys(u.salted_password), u.iterations)
         for name, (mechanism, u) in upsertions.items()],
        [(name, mechanism.kafka_type) for name, mechanism in deletions.items()])
    results = [result(name, ErrorCode.none, None) for name in (*deletions, *upsertions)]
    results.extend(result(name, code, message) for name, (code, message) in errors.items())
    return m.AlterUserScramCredentialsResponse(throttle_time=_NO_THROTTLE,
                                               results=tuple(results))


def describe(credentials: ScramCredentials, ctx: RequestContext, request: Any) -> Any:
    m = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
    if not ctx.authorize(ctx.session, "DESCRIBE", "CLUSTER", CLUSTER_NAME):
        return make(m.DescribeUserScramCredentialsResponse, throttle_time=_NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", results=())
    wanted = None if request.users is None else [u.name for u in request.users]
    names = wanted or credentials.users()
    seen: set[str] = set()
    results = []
    for name in names:
        if name in seen:
            continue
        if wanted is not None and wanted.count(name) > 1:
            code, message = (ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials "
                             f"for the same user twice in a single request: {name}")
            infos: tuple[Any, ...] = ()
        else:
            found = credentials.of_user(name)
            infos = tuple(m.CredentialInfo(mechanism=mechanism, iterations=iterations)
                          for mechanism, iterations in sorted(found.items()))
            # Kafka's result carries an empty message, not a null one, for a user found
            code, message = ((ErrorCode.none, "") if found else (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {name}"))
        seen.add(name)
        results.append(m.DescribeUserScramCredentialsResult(
            user=name, error_code=code, error_message=message, credential_infos=infos))
    return make(m.DescribeUserScramCredentialsResponse, throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.none, error_message=None, results=tuple(results))
