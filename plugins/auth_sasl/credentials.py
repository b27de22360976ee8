"""The broker's SCRAM credentials: (user, mechanism) -> salted credential, the state
AlterUserScramCredentials changes and the SCRAM exchange reads."""

from __future__ import annotations

from plugins.auth_sasl.scram import ScramCredential

__all__ = ["ScramCredentials"]


class ScramCredentials:
    def __init__(self) -> None:
        self._by_user: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._by_user.setdefault(user, {})[mechanism] = credential

    def remove(self, user: str, mechanism: str) -> None:
        found = self._by_user.get(user, {})
        found.pop(mechanism, None)
        if not found:
            self._by_user.pop(user, None)

    def users(self) -> list[str]:
        return sorted(self._by_user)

    def of_user(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._by_user.get(user, {}))
