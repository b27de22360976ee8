"""The ``[plugins.acl]`` table: Kafka's authorizer settings."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.api.config import setting

__all__ = ["AclSettings"]


def _principals(value: str) -> str | None:
    for principal in filter(None, (p.strip() for p in value.split(";"))):
        kind, sep, name = principal.partition(":")
        if not (kind and sep and name):
            return "principals as Type:name (User:admin), separated by semicolons"
    return None


@dataclass(frozen=True, slots=True)
class AclSettings:
    super_users: str = setting(
        "super.users", "",
        "Principals allowed every operation on every resource, whatever the ACLs, "
        "separated by semicolons (User:admin;User:broker).", check=_principals,
    )
    allow_everyone_if_no_acl_found: bool = setting(
        "allow.everyone.if.no.acl.found", False,
        "Allow an action on a resource that has no ACL at all (any ACL on the resource, "
        "for any principal, turns this off for it).",
    )
