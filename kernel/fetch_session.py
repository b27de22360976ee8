"""KIP-227 incremental fetch sessions, sans-io: Kafka's FetchSession, FetchSessionCache
and FetchManager.newContext (kafka.server.FetchSession.scala).

A fetcher (a consumer, or a follower replica) asks for a session with a full fetch
(session id 0, epoch 0) and is answered the new session's id. Its later requests name
the session and the next epoch, and carry only the partitions whose fetch parameters
changed and the ones to forget; the broker reads every partition of the session and
answers only those with something to report (records, a moved high watermark or log
start offset, an error, a diverging epoch). Epoch -1 asks for no session (and closes the
one named). The Fetch handler drives this module; the cache is the broker's, one per
broker (``Broker.fetch_sessions``).

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. A full
cache makes room, as Kafka's ``tryEvict``, by evicting the least recently used session
once it went unused for ``min.incremental.fetch.session.eviction.ms``, else the least
valuable evictable one (fewer partitions; a follower's session, privileged, is evictable
only by another follower's until it is that old), else answers session id 0: the
fetcher goes on with full fetches. Kafka 3.8+ splits its cache into shards for its
request threads; one event loop needs no shards, so the eviction rules apply to the
whole cache.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "FetchedPartition",
    "FullFetch",
    "IncrementalFetch",
    "SessionError",
    "Sessionless",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # with session id 0: a full fetch that asks for a session
FINAL_EPOCH = -1   # a full fetch without a session (and closing the one named)
_INT_MAX = 2**31 - 1
ZERO_UUID = uuid.UUID(int=0)

# A partition's identity in a session: its topic id in a session of Fetch v13+ (whose
# requests name topics by id), else its topic name; as Kafka's CachedPartition.equals.
Key = tuple[uuid.UUID | str | None, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: FINAL_EPOCH stays, the maximum wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT_MAX else epoch + 1


class FetchedPartition(Protocol):
    """One partition of a fetch as the handler holds it: what was asked (from the
    request, or from the session for partitions the request left out) and what is
    answered (offsets as they go on the wire: -1 with an error)."""

    topic: str | None
    topic_id: uuid.UUID | None
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    follower_log_start_offset: int
    error: ErrorCode
    records: bytes | memoryview
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    diverging: tuple[int, int] | None


F = TypeVar("F", bound=FetchedPartition)


def key_of(p: FetchedPartition, uses_topic_ids: bool) -> Key:
    return (p.topic_id if uses_topic_ids else p.topic, p.index)


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a session (Kafka's CachedPartition): its last request
    parameters, and what was last answered for it, so that an unchanged partition is
    left out of the next answer."""

    key: Key
    topic: str | None  # None: a topic id this broker did not know when it was added
    topic_id: uuid.UUID  # the zero id in a session by topic names
    index: int
    max_bytes: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    fetcher_log_start_offset: int  # a follower's own log start offset
    high_watermark: int = -1
    # Kafka caches no last stable offset: its LSO moves only with its high watermark.
    # Kafkernel's does too, but an answer is cheaper than proving it for every path.
    last_stable_offset: int = -1
    local_log_start_offset: int = -1

    @classmethod
    def of(cls, key: Key, p: FetchedPartition) -> CachedPartition:
        return cls(key, p.topic, p.topic_id or ZERO_UUID, p.index, p.max_bytes,
                   p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch,
                   p.follower_log_start_offset)

    def update_request(self, p: FetchedPartition) -> None:
        self.max_bytes = p.max_bytes
        self.fetch_offset = p.fetch_offset
        self.current_leader_epoch = p.current_leader_epoch
        self.last_fetched_epoch = p.last_fetched_epoch
        self.fetcher_log_start_offset = p.follower_log_start_offset

    def must_respond(self, p: FetchedPartition,
                     changed: list[tuple[CachedPartition, int, int, int]] | None = None,
                     ) -> bool:
        """Kafka's maybeUpdateResponseData: whether ``p``'s answer goes in an incremental
        response, remembering what it reports (and, in ``changed``, what it remembered
        before). An error is always answered and resets the cached high watermark, so
        the partition is answered again once it clears."""
        high_watermark, last_stable = self.high_watermark, self.last_stable_offset
        log_start = self.local_log_start_offset
        if (high_watermark == p.high_watermark and last_stable == p.last_stable_offset
                and log_start == p.log_start_offset and p.error == ErrorCode.none):
            return len(p.records) > 0 or p.diverging is not None
        if changed is not None:
            changed.append((self, high_watermark, last_stable, log_start))
        self.high_watermark = p.high_watermark if p.error == ErrorCode.none else -1
        self.last_stable_offset = p.last_stable_offset
        self.local_log_start_offset = p.log_start_offset
        return True

    def answered_fully(self, p: FetchedPartition) -> None:
        """What a full fetch answered, as the session starts from it."""
        self.high_watermark = p.high_watermark
        self.last_stable_offset = p.last_stable_offset
        self.local_log_start_offset = p.log_start_offset


@dataclass(slots=True, eq=False)
class FetchSession:
    """Kafka's FetchSession: its partitions in fetch order (a partition that returned
    records moves to the end, so the response's bytes rotate over the partitions)."""

    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool  # created by Fetch v13+; its requests must stay at v13+
    creation_ms: int
    partitions: dict[Key, CachedPartition]
    last_used_ms: int = 0
    epoch: int = 1
    # The cache's bookkeeping, as of the last touch (Kafka's cachedSize and the two
    # evictable trees).
    cached_size: int = -1
    evictable_by_privileged: bool = False
    evictable_by_all: bool = False
    # What the last incremental answer changed, for a throttle to take back: the epoch
    # it left, (partition, high watermark, LSO, log start) before it, and the fetch
    # order before it moved partitions (None: none moved).
    last_answer: tuple[int, list[tuple[CachedPartition, int, int, int]],
                       list[Key] | None] | None = None

    def take_back_answer(self) -> None:
        """The last answer was throttled and not sent (Kafka's IncrementalFetchContext
        then skips updateAndGenerateResponseData): the session remembers what it
        remembered before it, so the next answer reports the same news."""
        if self.last_answer is None or self.last_answer[0] != self.epoch:
            return
        _, changed, order = self.last_answer
        self.last_answer = None
        for cached, high_watermark, last_stable, log_start in changed:
            cached.high_watermark = high_watermark
            cached.last_stable_offset = last_stable
            cached.local_log_start_offset = log_start
        if order is not None:
            partitions = self.partitions
            for key in order:
                if key in partitions:
                    partitions[key] = partitions.pop(key)

    def update(self, requested: Iterable[FetchedPartition], forgotten: Iterable[Key]) -> None:
        """The partitions an incremental request sent (added, or their parameters
        updated) and the ones it forgot (removed)."""
        partitions = self.partitions
        for p in requested:
            key = key_of(p, self.uses_topic_ids)
            cached = partitions.get(key)
            if cached is None:
                partitions[key] = CachedPartition.of(key, p)
            else:
                cached.update_request(p)
        for key in forgotten:
            partitions.pop(key, None)


# -- contexts: what FetchManager.newContext decides for one request -------------------

@dataclass(frozen=True, slots=True)
class SessionError:
    """The request names a session it cannot use: answered with ``error`` at the top
    level, no partitions and session id 0."""

    error: ErrorCode


@dataclass(frozen=True, slots=True)
class Sessionless:
    """A full fetch without a session: every partition asked is answered."""


@dataclass(slots=True)
class FullFetch:
    """A full fetch that asks for a session: every partition asked is answered, and the
    answer names the new session when the cache has room for it."""

    cache: FetchSessionCache
    privileged: bool
    uses_topic_ids: bool

    def session_id(self, answered: Sequence[FetchedPartition], now_ms: int) -> int:
        def partitions() -> dict[Key, CachedPartition]:
            cached: dict[Key, CachedPartition] = {}
            for p in answered:
                key = key_of(p, self.uses_topic_ids)
                c = cached[key] = CachedPartition.of(key, p)
                c.answered_fully(p)
            return cached
        return self.cache.maybe_create_session(now_ms, self.privileged, len(answered),
                                               self.uses_topic_ids, partitions)


@dataclass(slots=True)
class IncrementalFetch:
    """An incremental fetch in ``session``: every partition of the session is read, and
    only those with something to report are answered."""

    session: FetchSession
    request_epoch: int

    def answer(self, fetched: Sequence[F]) -> tuple[ErrorCode, list[F]]:
        """Kafka's IncrementalFetchContext.updateAndGenerateResponseData: the
        partitions to answer, or INVALID_FETCH_SESSION_EPOCH when another request moved
        the session on while this one waited (a duplicate)."""
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            return ErrorCode.invalid_fetch_session_epoch, []
        partitions = session.partitions
        uses_topic_ids = session.uses_topic_ids
        answered: list[F] = []
        changed: list[tuple[CachedPartition, int, int, int]] = []
        order: list[Key] | None = None
        for p in fetched:
            key = key_of(p, uses_topic_ids)
            cached = partitions.get(key)
            if cached is None or not cached.must_respond(p, changed):
                continue
            answered.append(p)
            if len(p.records):
                if order is None:
                    order = list(partitions)
                partitions[key] = partitions.pop(key)  # to the end of the fetch order
        session.last_answer = (session.epoch, changed, order)
        return ErrorCode.none, answered


FetchContext = SessionError | Sessionless | FullFetch | IncrementalFetch


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache, one shard)."""

    def __init__(self, max_entries: int, eviction_ms: int,
                 random_id: Callable[[], int] | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._random_id = random_id or (lambda: random.randint(1, _INT_MAX - 1))
        # Least recently used first: a touch moves a session to the end.
        self._sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        """The sessions, least recently used first (a copy: for metrics and tests)."""
        return list(self._sessions.values())

    # -- FetchManager.newContext ---------------------------------------------------

    def new_context(self, version: int, session_id: int, epoch: int, privileged: bool,
                    requested: Sequence[FetchedPartition], forgotten: Iterable[Key],
                    now_ms: int) -> FetchContext:
        """What to make of a request's session fields. An incremental request's
        partitions and forgotten ones are applied to its session here, and its epoch
        moves on, as Kafka does before reading any log."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return Sessionless()
            return FullFetch(self, privileged, version >= 13)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionError(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (version >= 13):
            return SessionError(ErrorCode.fetch_session_topic_id_error)
        session.update(requested, forgotten)
        if not session.partitions:
            self.remove(session_id)
            return Sessionless()
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetch(session, epoch)

    # -- the cache -------------------------------------------------------------------

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int,
                             uses_topic_ids: bool,
                             partitions: Callable[[], dict[Key, CachedPartition]]) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache is full and nothing
        in it may be evicted for this one."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(
                privileged, size, now_ms):
            return INVALID_SESSION_ID
        session_id = self._random_id()
        while session_id in self._sessions or session_id == INVALID_SESSION_ID:
            session_id = self._random_id()
        session = FetchSession(session_id, privileged, uses_topic_ids, now_ms, partitions(),
                               epoch=next_epoch(INITIAL_EPOCH))
        self._sessions[session_id] = session
        self.touch(session, now_ms)
        return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict: a stale session (unused for eviction_ms) first; else the
        least valuable evictable one, (privileged, size, id) being the value, if it is
        worth less than the newcomer's (privileged, size, 0)."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        if (privileged, size, 0) < (least.privileged, least.cached_size, least.id):
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def throttled(self, session_id: int, request_epoch: int) -> int:
        """The session id a throttled fetch answers (Kafka's getThrottledResponse): a
        full fetch makes no session, so the one its answer named is removed and it
        answers 0; an incremental one keeps its session, which takes back the answer."""
        if session_id == INVALID_SESSION_ID:
            return INVALID_SESSION_ID
        if request_epoch == INITIAL_EPOCH:
            self.remove(session_id)
            return INVALID_SESSION_ID
        session = self._sessions.get(session_id)
        if session is not None:
            session.take_back_answer()
        return session_id

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self.num_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Kafka's touch: the session becomes the most recently used, its size is
        counted again, and whether it may be evicted is decided by its age now."""
        self._sessions[session.id] = self._sessions.pop(session.id)
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.num_partitions += session.cached_size
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

