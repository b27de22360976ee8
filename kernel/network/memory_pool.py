"""queued.max.request.bytes: a bound on the request bytes a broker holds across all
connections, as Kafka's MemoryPool does by muting reads while the pool is exhausted.

Kafka reserves a request's full size from the pool once its length prefix is read, so
a prefix that claims 100 MB and sends nothing else takes 100 MB of the pool. Here the
pool counts bytes that arrived and are not handled yet (the part of a frame read so
far, and whole frames waiting behind the request in flight): a claim costs nothing
until its bytes come. A connection that reads while the pool is exhausted is muted
until handled requests give bytes back. Since a partial frame is not a reservation,
muted connections could all hold partial frames that none may finish; the pool always
lets one of them (the longest muted) read until its frame is whole, so memory goes past
the bound by at most one request (Kafka's non-strict pool does the same).

Connections that have not authenticated (SASL listeners) do not draw on that pool:
Kafka reads their frames on the heap, bounded by sasl.server.max.receive.size each,
outside queued.max.request.bytes. Here they share a PreAuthPool of their own, small and
separate, so they can never take bytes authenticated clients need. Muting them when it
is full would stall every login behind the connections filling it, so the pool closes
the unauthenticated connection holding the most bytes instead: a login's frames are a
few hundred bytes, handled as they arrive, and never the largest.
"""

from __future__ import annotations

from typing import Protocol

# The pre-authentication share: this fraction of queued.max.request.bytes (16 MiB of
# the default 256 MiB, also when unbounded), and never under two frames of
# sasl.server.max.receive.size.
PREAUTH_SHARE_DIVISOR = 16
PREAUTH_SHARE_UNBOUNDED = 16 * 1024 * 1024


class PoolMember(Protocol):
    """A connection as the pool sees it."""

    @property
    def partial_bytes(self) -> int: ...

    def set_pool_muted(self, muted: bool) -> None: ...


class MemoryPool:
    def __init__(self, size: int) -> None:
        """``size`` <= 0 is unbounded (Kafka's MemoryPool.NONE)."""
        self.size = size if size > 0 else None
        self.used = 0
        self._muted: dict[PoolMember, None] = {}  # insertion order: longest muted first
        self._granted: PoolMember | None = None

    @property
    def exhausted(self) -> bool:
        return self.size is not None and self.used >= self.size

    @property
    def available(self) -> int | None:
        return None if self.size is None else self.size - self.used

    def allocate(self, n: int) -> None:
        """``n`` request bytes arrived."""
        self.used += n

    def release(self, n: int) -> None:
        """``n`` request bytes were handled or dropped with their connection."""
        self.used -= n
        if self._muted and not self.exhausted:
            muted, self._muted = self._muted, {}
            for member in muted:
                member.set_pool_muted(False)

    def after_read(self, member: PoolMember) -> None:
        """Mutes ``member`` while the pool is exhausted, unless it is the one allowed
        to finish its frame."""
        if not self.exhausted or member is self._granted or member in self._muted:
            return
        self._muted[member] = None
        member.set_pool_muted(True)
        self._grant_one()

    def frame_done(self, member: PoolMember) -> None:
        """``member`` completed a frame: its grant, if it had one, ends."""
        if member is self._granted:
            self._granted = None
            self._grant_one()

    def forget(self, member: PoolMember) -> None:
        self._muted.pop(member, None)
        if member is self._granted:
            self._granted = None
            self._grant_one()

    def _grant_one(self) -> None:
        if self._granted is not None or not self.exhausted:
            return
        for member in self._muted:
            if member.partial_bytes:
                del self._muted[member]
                self._granted = member
                member.set_pool_muted(False)
                return


class PreAuthMember(Protocol):
    """An unauthenticated connection as the pre-authentication pool sees it."""

    @property
    def buffered_bytes(self) -> int: ...

    def evict_unauthenticated(self, share: int) -> None: ...


def preauth_share(queued_max_request_bytes: int, sasl_max_receive_size: int) -> int:
    share = (queued_max_request_bytes // PREAUTH_SHARE_DIVISOR if queued_max_request_bytes > 0
             else PREAUTH_SHARE_UNBOUNDED)
    return max(share, 2 * sasl_max_receive_size)


class PreAuthPool:
    """Request bytes of connections that have not authenticated: over ``size``, the one
    holding most is closed (it gives its bytes back as it goes)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._members: dict[PreAuthMember, None] = {}

    def join(self, member: PreAuthMember) -> None:
        self._members[member] = None

    def allocate(self, n: int) -> None:
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n

    def after_read(self, member: PreAuthMember) -> None:
        while self.used > self.size and self._members:
            largest = max(self._members, key=lambda m: m.buffered_bytes)
            if largest.buffered_bytes == 0:
                return  # nothing to take back: bytes in flight, released as answered
            del self._members[largest]
            largest.evict_unauthenticated(self.size)

    def frame_done(self, member: PreAuthMember) -> None:
        pass

    def forget(self, member: PreAuthMember) -> None:
        self._members.pop(member, None)
