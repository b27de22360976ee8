"""The broker's SCRAM credentials as the SCRAM exchange and the credential APIs see them:
a view over the metadata backend, which keeps them in the metadata log (Kafka's
UserScramCredentialRecord), so they survive a restart."""

from __future__ import annotations

from collections.abc import Sequence

from kernel.api.cluster import MetadataBackend
from kernel.api.cluster import ScramCredential as StoredCredential
from plugins.auth_sasl.scram import MECHANISMS, ScramCredential

__all__ = ["ScramCredentials", "StoredCredential"]


class ScramCredentials:
    def __init__(self, backend: MetadataBackend) -> None:
        self._backend = backend

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        stored = self._backend.scram_credentials().get((user, MECHANISMS[mechanism].kafka_type))
        if stored is None:
            return None
        return ScramCredential(stored.salt, stored.stored_key, stored.server_key,
                               stored.iterations)

    def users(self) -> list[str]:
        return sorted({name for name, _ in self._backend.scram_credentials()})

    def of_user(self, user: str) -> dict[int, int]:
        """Mechanism type -> iterations of ``user``'s credentials."""
        return {mechanism: c.iterations
                for (name, mechanism), c in self._backend.scram_credentials().items()
                if name == user}

    def exists(self, user: str, mechanism_type: int) -> bool:
        return (user, mechanism_type) in self._backend.scram_credentials()

    async def alter(self, upsertions: Sequence[StoredCredential],
                    deletions: Sequence[tuple[str, int]]) -> None:
        await self._backend.alter_scram_credentials(upsertions, deletions)
