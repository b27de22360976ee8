"""The broker's registration and heartbeats with the active controller (Kafka's
BrokerLifecycleManager).

A broker registers (BrokerRegistration v4: its id, the cluster id, a new incarnation id
per process, the listeners of its broker role, the features it supports, its rack, its
log dirs' ``directory.id``, the epoch of its last clean shutdown), retrying until
``initial.broker.registration.timeout.ms``; the controller answers with its broker epoch
(the offset of its RegisterBrokerRecord) and holds it fenced. Then it heartbeats every
``broker.heartbeat.interval.ms`` with the metadata offset it has replayed. The states
are Kafka's ``BrokerState``:

- STARTING until the controller says it caught up (``IsCaughtUp``: the offset reached
  its registration);
- RECOVERY (fenced) until the broker is ready (``set_ready_to_unfence``: it published
  its first image) and the controller unfences it (``IsFenced=false``);
- RUNNING (unfenced: only now does a Kafka broker serve clients);
- PENDING_CONTROLLED_SHUTDOWN: ``WantShutDown`` until the controller answers
  ``ShouldShutDown`` (it moved this broker's leaderships away);
- SHUTTING_DOWN.

Errors are handled as Kafka's manager does: an error answer or no answer is logged and
the request sent again after the heartbeat interval. A heartbeat gets
STALE_BROKER_EPOCH when the controller holds another registration for this id, or none
(Kafka 4.3.1 answers an unknown id so, not BROKER_ID_NOT_REGISTERED); Kafka leaves that
to the metadata publisher, which calls ``resend_registration`` when the image no longer
holds this incarnation's registration. A registration answered
DUPLICATE_BROKER_REGISTRATION (another incarnation's session is still live) is sent
again until that session expires or the initial registration times out.

The request building and answer handling are plain methods (``registration_request``,
``on_heartbeat``...) that return the delay before the next request; :meth:`start` runs
them against a channel in one task."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i64, u16

from kernel.api.config import BrokerConfig

from .channel import ControllerUnavailableError

log = logging.getLogger(__name__)

# Kafka's SecurityProtocol ids, as BrokerRegistration carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

# The feature levels this broker registers (min, max). A 4.3.1 broker registers
# metadata.version 7-30, kraft.version 0-1 and the group/share/streams/ELR features
# 0-1, transaction.version 0-2. Kafkernel speaks the metadata records of every
# metadata.version from 3.3-IV3 (7) to 4.3-IV0 (30) and reads KRaftVersion/Voters
# records, but implements neither KIP-848's consumer groups (group.version 1), share
# groups (share.version 1), streams groups (streams.version 1), eligible leader
# replicas (ELR 1) nor KIP-890's transaction.version 2: it claims level 0 only for
# those. A controller whose cluster finalized a higher level refuses the registration
# with UNSUPPORTED_VERSION, and leaving the feature out does not help (4.3.1 checks
# every finalized feature; both checked against the reference): such a cluster is
# formatted with `kafka-storage format --feature group.version=0 ...` (or downgraded).
SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    "metadata.version": (7, 30),
    "kraft.version": (0, 1),
    "eligible.leader.replicas.version": (0, 0),
    "group.version": (0, 0),
    "share.version": (0, 0),
    "streams.version": (0, 0),
    "transaction.version": (0, 0),
}

# Kafka's timings outside the settings: the next heartbeat 10 ms after one while
# STARTING, 50 ms after the first answer to a controlled shutdown.
STARTING_HEARTBEAT_S = 0.010
FIRST_SHUTDOWN_HEARTBEAT_S = 0.050


class BrokerState(enum.IntEnum):
    """Kafka's org.apache.kafka.metadata.BrokerState (the values of its metric)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass(frozen=True, slots=True)
class BrokerListener:
    """One listener of the broker role, as advertised."""

    name: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerRegistrationInfo:
    """What a broker registers; ``previous_broker_epoch`` is the epoch its last clean
    shutdown recorded (-1: none), ``log_dirs`` its dirs' ``directory.id``."""

    node_id: int
    cluster_id: str
    listeners: Sequence[BrokerListener]
    log_dirs: Sequence[uuid.UUID]
    rack: str | None = None
    features: Mapping[str, tuple[int, int]] = field(
        default_factory=lambda: dict(SUPPORTED_FEATURES))
    previous_broker_epoch: int = -1


class ControllerSender(Protocol):
    """The channel to the active controller (:class:`~.channel.ControllerChannel`)."""

    async def send(self, body: Any, timeout_s: float | None = None) -> Any:
        ...


class BrokerLifecycleStoppedError(Exception):
    """The lifecycle stopped before what was awaited happened."""


class BrokerLifecycleManager:
    """Register, heartbeat, unfence, shut down in a controlled way. ``metadata_offset``
    gives the metadata offset this broker has replayed (the Raft observer's)."""

    def __init__(self, info: BrokerRegistrationInfo, channel: ControllerSender,
                 metadata_offset: Callable[[], int], *, heartbeat_interval_s: float,
                 initial_registration_timeout_s: float, request_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for listener in info.listeners:
            if listener.security_protocol not in SECURITY_PROTOCOL_IDS:
                raise ValueError(f"listener {listener.name}: unknown security protocol "
                                 f"{listener.security_protocol!r}")
        if not info.log_dirs:
            # Kafka 4.3.1's controller answers INVALID_REGISTRATION to a registration
            # without log dirs (metadata.version 3.7-IV2 and later).
            raise ValueError("a broker registers at least one log dir's directory.id")
        self.info = info
        self.incarnation_id = uuid.uuid4()
        self._channel = channel
        self._metadata_offset = metadata_offset
        self._interval_s = heartbeat_interval_s
        self._initial_timeout_s = initial_registration_timeout_s
        self._request_timeout_s = request_timeout_s
        self._clock = clock
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.registered = False
        self.initial_registration_succeeded = False
        self.ready_to_unfence = False
        self.failure: str | None = None
        self._got_shutdown_answer = False
        self._last_error: ErrorCode | str | None = None
        self._registration_deadline = 0.0
        self._caught_up = asyncio.Event()
        self._unfenced = asyncio.Event()
        self._stopped = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- requests and answers (no I/O) --------------------------------------------------

    def registration_request(self) -> BrokerRegistrationRequest:
        info = self.info
        return BrokerRegistrationRequest(
            broker_id=BrokerId(info.node_id), cluster_id=info.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=tuple(Listener(name=lst.name, host=lst.host, port=u16(lst.port),
                                     security_protocol=i16(
                                         SECURITY_PROTOCOL_IDS[lst.security_protocol]))
                            for lst in info.listeners),
            features=tuple(Feature(name=name, min_supported_version=i16(low),
                                   max_supported_version=i16(high))
                           for name, (low, high) in sorted(info.features.items())),
            rack=info.rack, log_dirs=tuple(sorted(info.log_dirs)),
            previous_broker_epoch=i64(info.previous_broker_epoch))

    def heartbeat_request(self) -> BrokerHeartbeatRequest:
        return BrokerHeartbeatRequest(
            broker_id=BrokerId(self.info.node_id), broker_epoch=i64(self.broker_epoch),
            current_metadata_offset=i64(self._metadata_offset()),
            want_fence=not self.ready_to_unfence,
            want_shut_down=self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN)

    def next_request(self) -> BrokerRegistrationRequest | BrokerHeartbeatRequest:
        return self.heartbeat_request() if self.registered else self.registration_request()

    def on_registration(self, response: BrokerRegistrationResponse) -> float:
        """Seconds until the next request."""
        if response.error_code != ErrorCode.none:
            self._error("register", response.error_code)
            return self._interval_s
        self._last_error = None
        self.broker_epoch = int(response.broker_epoch)
        self.registered = self.initial_registration_succeeded = True
        log.info("Registered broker %d (incarnation %s) with broker epoch %d",
                 self.info.node_id, self.incarnation_id, self.broker_epoch)
        return 0.0  # heartbeat at once

    def on_heartbeat(self, response: BrokerHeartbeatResponse) -> float:
        """Seconds until the next request."""
        if response.error_code != ErrorCode.none:
            self._error("heartbeat", response.error_code)
            return self._interval_s
        self._last_error = None
        if self.state == BrokerState.STARTING:
            if response.is_caught_up:
                self._set_state(BrokerState.RECOVERY, "caught up with the metadata log")
                self._caught_up.set()
            return STARTING_HEARTBEAT_S
        if self.state == BrokerState.RECOVERY:
            if not response.is_fenced:
                self._set_state(BrokerState.RUNNING, "unfenced by the controller")
                self._unfenced.set()
        elif self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                self._shut_down("the controller lets it shut down")
                return 0.0
            first, self._got_shutdown_answer = not self._got_shutdown_answer, True
            if first:
                return FIRST_SHUTDOWN_HEARTBEAT_S
        return self._interval_s

    def on_failure(self, why: str) -> float:
        """No answer from any controller; seconds until the next try."""
        self._error("register" if not self.registered else "heartbeat", why)
        return self._interval_s

    def check_registration_timeout(self) -> bool:
        """True (and SHUTTING_DOWN) once the first registration timed out."""
        if self.initial_registration_succeeded or self.state == BrokerState.SHUTTING_DOWN:
            return False
        if self._clock() < self._registration_deadline:
            return False
        self.failure = (f"broker {self.info.node_id} could not register with the "
                        f"controller quorum within initial.broker.registration.timeout.ms "
                        f"({self._initial_timeout_s * 1000:.0f} ms)")
        log.error("%s: shutting down", self.failure)
        self._shut_down("registration timed out")
        return True

    def _error(self, what: str, error: ErrorCode | str) -> None:
        # One line per new error; its repeats every heartbeat interval at debug.
        level = logging.DEBUG if error == self._last_error else logging.WARNING
        self._last_error = error
        text = error.name.upper() if isinstance(error, ErrorCode) else error
        hint = {
            ErrorCode.duplicate_broker_registration:
                ": another incarnation of this broker id still has a live session",
            ErrorCode.stale_broker_epoch:
                f": the controller holds another registration than epoch {self.broker_epoch}",
            ErrorCode.broker_id_not_registered: ": the controller has no registration for it",
            ErrorCode.unsupported_version:
                ": the cluster finalized a feature level outside "
                + ", ".join(f"{n} {lo}-{hi}" for n, (lo, hi) in
                            sorted(self.info.features.items())),
            ErrorCode.invalid_registration: ": the controller refused its listeners or log dirs",
            ErrorCode.inconsistent_cluster_id: f": this broker is in cluster "
                                               f"{self.info.cluster_id}",
        }.get(error, "") if isinstance(error, ErrorCode) else ""
        log.log(level, "Broker %d could not %s: %s%s; retrying", self.info.node_id, what,
                text, hint)

    def _set_state(self, state: BrokerState, why: str) -> None:
        log.info("Broker %d is now %s (was %s): %s", self.info.node_id, state.name,
                 self.state.name, why)
        self.state = state

    def _shut_down(self, why: str) -> None:
        if self.state != BrokerState.SHUTTING_DOWN:
            self._set_state(BrokerState.SHUTTING_DOWN, why)
        self._stopped.set()
        self._wake.set()

    # -- what the broker calls ------------------------------------------------------------

    def start(self) -> None:
        """Begin registering (STARTING)."""
        if self._task is not None:
            raise RuntimeError("the broker lifecycle was started already")
        self._registration_deadline = self._clock() + self._initial_timeout_s
        self._set_state(BrokerState.STARTING,
                        f"incarnation {self.incarnation_id} in cluster {self.info.cluster_id}")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"broker-lifecycle-{self.info.node_id}")

    def set_ready_to_unfence(self) -> None:
        """The broker published its first metadata image: ask to be unfenced."""
        self.ready_to_unfence = True
        self._wake.set()

    def resend_registration(self) -> None:
        """Register again (the image no longer holds this incarnation's registration)."""
        self.registered = False
        self._wake.set()

    def begin_controlled_shutdown(self) -> None:
        """RUNNING -> PENDING_CONTROLLED_SHUTDOWN (heartbeats with WantShutDown at
        once); in any other state shut down at once, as Kafka's manager."""
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            return
        if self.state == BrokerState.RUNNING:
            self._set_state(BrokerState.PENDING_CONTROLLED_SHUTDOWN,
                            "controlled shutdown requested")
            self._wake.set()
        else:
            self._shut_down(f"controlled shutdown requested while {self.state.name}")

    async def wait_caught_up(self) -> None:
        await self._wait_for(self._caught_up, "caught up")

    async def wait_unfenced(self) -> None:
        """Returns once RUNNING; raises BrokerLifecycleStoppedError if it stopped first."""
        await self._wait_for(self._unfenced, "unfenced")

    async def wait_may_shut_down(self) -> None:
        """Returns once SHUTTING_DOWN (the controller answered ShouldShutDown, or the
        lifecycle stopped)."""
        await self._stopped.wait()

    async def _wait_for(self, event: asyncio.Event, what: str) -> None:
        if event.is_set():
            return
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._stopped.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if not event.is_set():
            raise BrokerLifecycleStoppedError(
                f"broker {self.info.node_id} stopped before it was {what}"
                + (f": {self.failure}" if self.failure else ""))

    async def close(self) -> None:
        """Stop heartbeating (SHUTTING_DOWN)."""
        self._shut_down("closed")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # -- the task ------------------------------------------------------------------------

    async def _run(self) -> None:
        while self.state != BrokerState.SHUTTING_DOWN:
            if self.check_registration_timeout():
                return
            request = self.next_request()
            timeout_s = self._request_timeout_s
            if not self.initial_registration_succeeded:
                timeout_s = min(timeout_s, max(self._registration_deadline - self._clock(),
                                               0.001))
            self._wake.clear()
            try:
                response = await self._channel.send(request, timeout_s)
            except ControllerUnavailableError as e:
                delay = self.on_failure(str(e))
                self._wake.clear()  # never at once after a failure, as Kafka
            else:
                if isinstance(response, BrokerRegistrationResponse):
                    delay = self.on_registration(response)
                else:
                    delay = self.on_heartbeat(response)
            if self.state == BrokerState.SHUTTING_DOWN:
                return
            if not self.initial_registration_succeeded:
                delay = min(delay, max(self._registration_deadline - self._clock(), 0.0))
            if delay > 0 and not self._wake.is_set():
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass


def lifecycle_for(config: BrokerConfig, info: BrokerRegistrationInfo,
                  channel: ControllerSender, metadata_offset: Callable[[], int]
                  ) -> BrokerLifecycleManager:
    """The manager with Kafka's settings; each registration or heartbeat is retried for
    half of ``broker.session.timeout.ms``, as Kafka's heartbeat channel (KAFKA-14392)."""
    return BrokerLifecycleManager(
        info, channel, metadata_offset,
        heartbeat_interval_s=config.broker_heartbeat_interval_ms / 1000,
        initial_registration_timeout_s=config.initial_broker_registration_timeout_ms / 1000,
        request_timeout_s=config.broker_session_timeout_ms / 2000)
