"""Client quotas enforced as Kafka's ClientQuotaManager and ClientRequestQuotaManager do
(KIP-13, KIP-124, KIP-219): each Produce request's size and each Fetch answer's record
bytes, and (request_percentage) each request's handler time, are recorded against the
quota that applies to the client, over quota.window.num (11) windows of
quota.window.size.seconds (1 s); over the quota, the answer carries throttle_time_ms and
the connection reads nothing for that long once the answer is out. Kafka measures a
request's time on its request handler threads; here it is the handler's time on the
event loop (its coroutine's steps, not its waits, nor tasks it hands work to).

Which quota applies, and so which clients share one rate, is Kafka's order of
precedence: /users/<user>/clients/<client-id>, /users/<user>/clients/<default>,
/users/<user>, /users/<default>/clients/<client-id>, /users/<default>/clients/<default>,
/users/<default>, /clients/<client-id>, /clients/<default>; the first entity with a
value for the key wins.

controller_mutation_rate (KIP-599) is a token bucket per entity, as Kafka's
ControllerMutationQuotaManager keeps it: it refills at the quota per second up to
quota.window.num windows of it, and each topic a CreateTopics, CreatePartitions or
DeleteTopics creates or deletes takes its partitions from it. Kafka's controller applies
it; in a single-process broker the handlers do, through RequestContext.mutation_quota."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from kernel.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
    QuotaValues,
)
from kernel.metrics import BrokerMetrics
from kernel.network.quotas import QUOTA_WINDOW_MS, QUOTA_WINDOW_NUM, ConnectionRate
from kernel.protocol.errors import ErrorCode, KafkaError
from kernel.requests import UNBOUNDED_MUTATION_QUOTA, ControllerMutationQuota

# Kafka's ClientQuotaManager drops a client's sensors after an hour without traffic.
INACTIVE_SENSOR_S = 3600.0
PRUNE_EVERY_S = 60.0
QUOTA_NAMES = {PRODUCER_BYTE_RATE: "produce", CONSUMER_BYTE_RATE: "fetch",
               REQUEST_PERCENTAGE: "request", CONTROLLER_MUTATION_RATE: "controller_mutation"}

Tags = tuple[str, str]  # (user, client-id), "" where the quota is not per that part


class ByteRate(ConnectionRate):
    """Kafka's Rate over a value (bytes, or handler time): the connection-rate windows,
    with a value per record and QuotaUtils.throttleTime, unbounded."""

    def record_bytes(self, now_ms: int, value: float) -> int:
        self._purge(now_ms)
        if self._samples and now_ms < self._samples[-1][0] + self._window_ms:
            self._samples[-1][1] += value  # type: ignore[call-overload]
        else:
            self._samples.append([now_ms, value])  # type: ignore[list-item]
            del self._samples[:-self._samples_max]
        observed = self.rate(now_ms)
        if observed <= self.quota:
            return 0
        return round((observed - self.quota) / self.quota * self._window_size_ms(now_ms))


    def unrecord(self, value: float) -> None:
        """Take back bytes recorded in the current window (a throttled fetch answers no
        records, as Kafka's unrecordQuotaSensor)."""
        if self._samples:
            self._samples[-1][1] -= value  # type: ignore[call-overload]


class TokenBucket:
    """Kafka's TokenBucket stat: refilled at ``quota`` tokens per second up to a burst of
    ``samples`` windows of it, starting full; a record may take it below zero."""

    def __init__(self, quota: float, samples: int = QUOTA_WINDOW_NUM,
                 window_ms: int = QUOTA_WINDOW_MS) -> None:
        self.quota = quota
        self._burst_seconds = samples * window_ms / 1000
        self._tokens = -1.0
        self._updated_ms: int | None = None

    def tokens(self, now_ms: int) -> float:
        burst = self.quota * self._burst_seconds
        if self._updated_ms is None:
            self._tokens = burst
        else:
            elapsed_s = max(0, now_ms - self._updated_ms) / 1000
            self._tokens = min(burst, self._tokens + self.quota * elapsed_s)
        self._updated_ms = now_ms
        return self._tokens

    def record(self, now_ms: int, value: float) -> float:
        """Take ``value`` tokens; the tokens left (negative: in debt)."""
        self._tokens = min(self.quota * self._burst_seconds, self.tokens(now_ms) - value)
        return self._tokens


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict- and
    PermissiveControllerMutationQuota). Strict (CreateTopics v6+, DeleteTopics v5+,
    CreatePartitions v3+): a topic is refused with THROTTLING_QUOTA_EXCEEDED while the
    bucket is in debt, and any topic is taken while it is not, even into debt; the
    answer is throttled only when a topic was refused. Permissive (older versions):
    every topic is taken, and the answer is throttled when the bucket ends in debt. The
    throttle is the time the bucket needs to get out of debt."""

    __slots__ = ("_bucket", "_clock", "_strict", "_throttle_ms", "_throttled_at_ms",
                 "recorded", "tags")

    def __init__(self, bucket: TokenBucket, strict: bool, clock: Callable[[], float],
                 tags: Tags) -> None:
        self.tags = tags  # the quota entity the request was resolved to, for its metrics
        self._bucket = bucket
        self._strict = strict
        self._clock = clock
        self._throttle_ms = 0
        self._throttled_at_ms = 0
        self.recorded = 0

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _in_debt(self, now_ms: int, tokens: float) -> None:
        self._throttle_ms = round(-tokens / self._bucket.quota * 1000)
        self._throttled_at_ms = now_ms

    def record(self, partitions: int) -> None:
        now_ms = self._now_ms()
        if self._strict:
            tokens = self._bucket.tokens(now_ms)
            if tokens < 0:
                self._in_debt(now_ms, tokens)
                # Kafka's answer has no message: its ApiError drops the default one.
                raise KafkaError(ErrorCode.throttling_quota_exceeded)
        tokens = self._bucket.record(now_ms, partitions)
        self.recorded += partitions
        if not self._strict and tokens < 0:
            self._in_debt(now_ms, tokens)

    def throttle_ms(self) -> int:
        """The throttle left: the debt's time less what passed since it was measured
        (a request may wait after it)."""
        if self._throttle_ms <= 0:
            return 0
        return max(0, self._throttle_ms - (self._now_ms() - self._throttled_at_ms))


def _precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, Tags]]:
    return [
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]


class ClientQuotaManager:
    """The produce and fetch byte-rate quotas of one broker (no state is shared between
    brokers in one process)."""

    def __init__(self, quotas: Callable[[], Mapping[QuotaEntity, QuotaValues]],
                 metrics: BrokerMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self._quotas = quotas
        self._metrics = metrics
        self._clock = clock
        self._seen: Mapping[QuotaEntity, QuotaValues] | None = None
        # (key, user, client id) -> (quota, tags), valid while the quotas mapping is.
        self._resolved: dict[tuple[str, str, str], tuple[float, Tags] | None] = {}
        self._sensors: dict[tuple[str, Tags], tuple[ByteRate, float]] = {}
        self._buckets: dict[Tags, tuple[TokenBucket, float]] = {}
        self._pruned_at = clock()
        self._seen_keys_of: Mapping[QuotaEntity, QuotaValues] | None = None
        self._keys: set[str] = set()

    def _resolve(self, key: str, user: str, client_id: str) -> tuple[float, Tags] | None:
        quotas = self._quotas()
        if quotas is not self._seen:  # a change replaces the mapping
            self._seen = quotas
            self._resolved.clear()
        found = self._resolved.get((key, user, client_id), ())
        if found != ():
            return found  # type: ignore[return-value]
        result = None
        if quotas:
            for entity, tags in _precedence(user, client_id):
                value = quotas.get(entity, {}).get(key)
                if value is not None:
                    result = (value, tags)
                    break
        self._resolved[(key, user, client_id)] = result
        return result

    def max_bytes_in_window(self, key: str, principal: str | None,
                            client_id: str | None) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one answer may carry, the quota
        times quota.window.num - 1 windows (None: no quota applies)."""
        resolved = self._resolve(key, (principal or "").removeprefix("User:"), client_id or "")
        if resolved is None:
            return None
        return resolved[0] * (QUOTA_WINDOW_NUM - 1) * QUOTA_WINDOW_MS / 1000

    @property
    def active(self) -> bool:
        """Whether any quota is set: without one, requests pay nothing for quotas."""
        return bool(self._quotas())

    def applies(self, key: str) -> bool:
        """Whether any entity has a value for ``key`` (no quota: nothing to measure)."""
        quotas = self._quotas()
        if quotas is not self._seen_keys_of:
            self._seen_keys_of = quotas
            self._keys = {k for values in quotas.values() for k in values}
        return key in self._keys

    def record(self, key: str, principal: str | None, client_id: str | None,
               value: float) -> int:
        """Record ``value`` (bytes; for request_percentage, percent-seconds of handler
        time) for the client; the throttle time in ms (0: none). Kafka bounds a request
        quota's throttle to one window, not a byte rate's."""
        sensor = self._sensor(key, principal, client_id)
        if sensor is None:
            return 0
        rate, tags = sensor
        throttle_ms = rate.record_bytes(int(self._clock() * 1000), value)
        if key == REQUEST_PERCENTAGE:
            throttle_ms = min(throttle_ms, QUOTA_WINDOW_MS)
        # Bytes a throttled fetch does not send are not counted (the dispatcher takes
        # them back from the rate); request quotas count no bytes.
        counted = 0 if key == REQUEST_PERCENTAGE or (
            key == CONSUMER_BYTE_RATE and throttle_ms > 0) else value
        self._metrics.client_quota_recorded(QUOTA_NAMES[key], tags, counted, throttle_ms)
        return throttle_ms

    def unrecord(self, key: str, principal: str | None, client_id: str | None,
                 value: float) -> None:
        """Take back what ``record`` counted (a throttled fetch answers no records, as
        Kafka's unrecordQuotaSensor)."""
        sensor = self._sensor(key, principal, client_id)
        if sensor is not None:
            sensor[0].unrecord(value)

    def mutation_quota(self, principal: str | None, client_id: str | None,
                       strict: bool) -> ControllerMutationQuota:
        """The client's controller mutation quota for one request (unbounded where no
        controller_mutation_rate applies to it)."""
        user = (principal or "").removeprefix("User:")
        resolved = self._resolve(CONTROLLER_MUTATION_RATE, user, client_id or "")
        if resolved is None:
            return UNBOUNDED_MUTATION_QUOTA
        quota, tags = resolved
        now = self._clock()
        entry = self._buckets.get(tags)
        bucket = TokenBucket(quota) if entry is None else entry[0]
        bucket.quota = quota  # an altered quota applies to the tokens left
        self._buckets[tags] = (bucket, now)
        if now - self._pruned_at > PRUNE_EVERY_S:
            self._prune(now)
        return MutationQuota(bucket, strict, self._clock, tags)

    def mutations_recorded(self, quota: ControllerMutationQuota) -> int:
        """The request's throttle time in ms over its controller mutation quota, with
        its partitions and throttle counted in the entity's metrics."""
        if not isinstance(quota, MutationQuota):
            return 0
        throttle_ms = quota.throttle_ms()
        self._metrics.client_mutations_recorded(quota.tags, quota.recorded, throttle_ms)
        return throttle_ms

    def _sensor(self, key: str, principal: str | None, client_id: str | None,
                ) -> tuple[ByteRate, Tags] | None:
        user = (principal or "").removeprefix("User:")
        resolved = self._resolve(key, user, client_id or "")
        if resolved is None:
            return None
        quota, tags = resolved
        now = self._clock()
        entry = self._sensors.get((key, tags))
        rate = ByteRate(quota, QUOTA_WINDOW_NUM, QUOTA_WINDOW_MS) if entry is None else entry[0]
        rate.quota = quota  # an altered quota applies to the rate measured so far
        self._sensors[(key, tags)] = (rate, now)
        if now - self._pruned_at > PRUNE_EVERY_S:
            self._prune(now)
        return rate, tags

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for sensor_key, (_, used) in list(self._sensors.items()):
            if now - used > INACTIVE_SENSOR_S:
                del self._sensors[sensor_key]
        for tags, (_, used) in list(self._buckets.items()):
            if now - used > INACTIVE_SENSOR_S:
                del self._buckets[tags]
