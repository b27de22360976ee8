"""The handler contract, the same for the kernel's handlers and a plugin's.

A handler is ``handler(ctx, request)``: the :class:`RequestContext` and the decoded kio
request, returning the kio response of the same version, an awaitable of it, or None.
A plugin registers handlers through the :class:`ApiRegistry` its
``kafkernel_register_apis`` hook is given, one by one or as handler modules
(:func:`register_handler_modules`). Through ``ctx.services`` a plugin's handler reads
:class:`~kernel.api.services.RequestServices`: the kernel's handlers see more of the
same broker, plugins do not rely on it."""

from kernel.authorized_operations import authorized_operations
from kernel.requests import (
    ANONYMOUS,
    BROKER,
    CONTROLLER,
    LISTENER_ROLES,
    ApiRegistry,
    Authorize,
    AuthorizeByResourceType,
    ControllerMutationQuota,
    Handler,
    HandlerResult,
    RequestContext,
    Session,
    register_handler_modules,
)
from kernel.slices import BIG_REQUEST_ENTRIES, in_slices

__all__ = [
    "ANONYMOUS",
    "BIG_REQUEST_ENTRIES",
    "BROKER",
    "CONTROLLER",
    "LISTENER_ROLES",
    "ApiRegistry",
    "Authorize",
    "AuthorizeByResourceType",
    "ControllerMutationQuota",
    "Handler",
    "HandlerResult",
    "RequestContext",
    "Session",
    "authorized_operations",
    "in_slices",
    "register_handler_modules",
]
