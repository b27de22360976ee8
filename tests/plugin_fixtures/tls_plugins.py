"""A plugin that records the principal each authorization is asked for: what the mTLS
principal of an SSL connection is, as an authorizer sees it."""

from __future__ import annotations

from kernel.api.handlers import Session
from kernel.api.hooks import hookimpl

PREFIX = "tests.plugin_fixtures.tls_plugins:"


class PrincipalRecorder:
    NAME = PREFIX + "PrincipalRecorder"

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, str, str, str]] = []

    @hookimpl
    def kafkernel_authorize(
        self, session: Session, operation: str, resource_type: str, resource_name: str
    ) -> bool | None:
        self.asked.append((session.principal, operation, resource_type, resource_name))
        return None  # leaves the decision to others: everything is allowed

    def principals(self) -> set[str | None]:
        return {principal for principal, *_ in self.asked}
