"""Broker registration, heartbeats, sessions, fencing and controlled shutdown: Kafka's
ClusterControlManager and BrokerHeartbeatManager, with the partition moves of
ReplicationControlManager.processBrokerHeartbeat (Kafka 4.3.1, checked in its bytecode
where the trunk source differs). Sessions live in memory only, as in Kafka: a new active
controller restarts every session from ``now`` (:meth:`ClusterControl.activate`), so a
failover fences nobody who keeps heartbeating.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from dataclasses import dataclass

from kio.schema.broker_heartbeat.v0.response import BrokerHeartbeatResponse as HeartbeatV0
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse as HeartbeatV1
from kio.schema.broker_heartbeat.v2.response import BrokerHeartbeatResponse as HeartbeatV2
from kio.schema.broker_registration.v0.response import (
    BrokerRegistrationResponse as RegistrationV0,
)
from kio.schema.broker_registration.v1.response import (
    BrokerRegistrationResponse as RegistrationV1,
)
from kio.schema.broker_registration.v2.response import (
    BrokerRegistrationResponse as RegistrationV2,
)
from kio.schema.broker_registration.v3.response import (
    BrokerRegistrationResponse as RegistrationV3,
)
from kio.schema.broker_registration.v4.response import (
    BrokerRegistrationResponse as RegistrationV4,
)
from kio.schema.unregister_broker.v0.response import UnregisterBrokerResponse
from kio.static.primitive import i64

from kernel.api.errors import ErrorCode, KafkaError

from ..image import RegisteredBroker
from ..records.schema import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    Message,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from . import broker_changes
from .messages import NO_THROTTLE, AnyRequest
from .state import ControllerResult, ControllerState

logger = logging.getLogger(__name__)

METADATA_VERSION = "metadata.version"
ELR_VERSION = "eligible.leader.replicas.version"
_HEARTBEAT = {0: HeartbeatV0, 1: HeartbeatV1, 2: HeartbeatV2}
_REGISTRATION = {0: RegistrationV0, 1: RegistrationV1, 2: RegistrationV2,
                 3: RegistrationV3, 4: RegistrationV4}


class BrokerControlState(enum.Enum):
    """BrokerHeartbeatManager's BrokerControlState."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled shutdown"
    SHUTDOWN_NOW = "shutdown now"


@dataclass(slots=True)
class BrokerHeartbeatState:
    """One broker's session (BrokerHeartbeatManager.BrokerHeartbeatState)."""

    broker_id: int
    last_contact_ms: int
    fenced: bool
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1  # -1: not shutting down

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0

    def control_state(self) -> BrokerControlState:
        if self.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.FENCED if self.fenced else BrokerControlState.UNFENCED


def _reserved_dir(d: uuid.UUID) -> bool:
    """DirectoryId.reserved: the ids below 100 (UNASSIGNED, LOST, MIGRATING...)."""
    return d.int < 100


class ClusterControl:
    """The active controller's broker sessions and the rules that use them."""

    def __init__(self, cluster_id: str, session_timeout_ms: int) -> None:
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, BrokerHeartbeatState] = {}

    # -- sessions (BrokerHeartbeatManager) --------------------------------------

    def activate(self, state: ControllerState, now: int) -> None:
        """Becoming the active controller: every registered broker's session starts
        now (ClusterControlManager.activate registers each with the new
        BrokerHeartbeatManager, whose touch stamps the current time)."""
        self._sessions = {b: BrokerHeartbeatState(b, now, r.fenced)
                          for b, r in state.registrations.items()}

    def session(self, broker_id: int) -> BrokerHeartbeatState | None:
        return self._sessions.get(broker_id)

    def has_valid_session(self, broker_id: int, now: int) -> bool:
        s = self._sessions.get(broker_id)
        return s is not None and not s.fenced and \
            s.last_contact_ms + self.session_timeout_ms >= now

    def _touch(self, broker_id: int, fenced: bool, metadata_offset: int, now: int) -> None:
        s = self._sessions.setdefault(broker_id, BrokerHeartbeatState(broker_id, now, fenced))
        s.last_contact_ms, s.fenced, s.metadata_offset = now, fenced, metadata_offset
        if fenced:
            # A fenced broker leaves controlled shutdown; its next heartbeat shuts it down.
            s.controlled_shutdown_offset = -1

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset of unfenced brokers not shutting down."""
        offsets = [s.metadata_offset for s in self._sessions.values()
                   if not s.fenced and not s.shutting_down]
        return min(offsets, default=2**63 - 1)

    def stale_broker(self, now: int) -> int | None:
        """BrokerHeartbeatManager.findOneStaleBroker: an unfenced broker whose session
        expired, the one heard from longest ago."""
        stale = [s for s in self._sessions.values()
                 if not s.fenced and s.last_contact_ms + self.session_timeout_ms < now]
        return min(stale, key=lambda s: s.last_contact_ms).broker_id if stale else None

    def next_session_expiry(self) -> int | None:
        """When the next unfenced session expires (the controller's timer), or None."""
        live = [s.last_contact_ms + self.session_timeout_ms
                for s in self._sessions.values() if not s.fenced]
        return min(live, default=None)

    # -- BrokerRegistration v0-4 -------------------------------------------------

    def register_broker(self, state: ControllerState, request: AnyRequest, *,
                        offset: int, now: int) -> ControllerResult:
        """ClusterControlManager.registerBroker. ``offset``: where the batch will land
        in the metadata log; a new incarnation's broker epoch is that offset (Kafka passes
        ``nextWriteOffset``)."""
        version = request.__version__
        try:
            records = self._registration_records(state, request, offset, now)
        except KafkaError as e:
            logger.info("BrokerRegistration of broker %d refused: %s", request.broker_id,
                        e.message or e.error_code.name)
            return ControllerResult((), _REGISTRATION[version](
                throttle_time=NO_THROTTLE, error_code=e.error_code, broker_epoch=i64(-1)))
        epoch = next(r.broker_epoch for r in records if isinstance(r, RegisterBrokerRecord))
        return ControllerResult(tuple(records), _REGISTRATION[version](
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, broker_epoch=i64(epoch)))

    def _registration_records(self, state: ControllerState, request: AnyRequest,
                              offset: int, now: int) -> list[Message]:
        if request.cluster_id != self.cluster_id:
            raise KafkaError(ErrorCode.inconsistent_cluster_id,
                             f"Expected cluster ID {self.cluster_id}, but got cluster ID "
                             f"{request.cluster_id}")
        broker_id = request.broker_id
        existing = state.registrations.get(broker_id)
        if existing is not None and self.has_valid_session(broker_id, now) and \
                request.incarnation_id != existing.incarnation_id:
            raise KafkaError(ErrorCode.duplicate_broker_registration,
                             "Another broker is registered with that broker id.")
        if getattr(request, "is_migrating_zk_broker", False):
            raise KafkaError(ErrorCode.broker_id_not_registered,
                             "Controller does not support registering ZK brokers.")
        log_dirs = tuple(d for d in getattr(request, "log_dirs", ()) if d is not None)
        self._check_log_dirs(state, broker_id, log_dirs)
        features = self._check_features(state, request)
        record = RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=request.incarnation_id,
            end_points=tuple(BrokerEndpoint(name=x.name, host=x.host, port=x.port,
                                            security_protocol=x.security_protocol)
                             for x in request.listeners),
            features=features, rack=request.rack, log_dirs=log_dirs,
            broker_epoch=offset, fenced=True)
        records: list[Message] = []
        if existing is None or request.incarnation_id != existing.incarnation_id:
            # A new incarnation: its old one's leaderships and ISR places go first
            # (BrokerShutdownHandler -> ReplicationControlManager.handleBrokerShutdown;
            # clean or not, both remove it: the ELR difference is in broker_changes).
            if existing is not None:
                records.extend(broker_changes.remove_broker(state, broker_id))
            record = _replace(record, broker_epoch=offset)
            self._sessions.pop(broker_id, None)
        else:
            # The same incarnation again: the registration is amended, epoch and state kept.
            record = _replace(record, broker_epoch=existing.epoch, fenced=existing.fenced,
                              in_controlled_shutdown=existing.in_controlled_shutdown)
        records.append(record)
        self._register_session(broker_id, record.fenced, now)
        logger.info("Broker %d registers (incarnation %s, epoch %d, fenced %s)", broker_id,
                    request.incarnation_id, record.broker_epoch, record.fenced)
        return records

    def _register_session(self, broker_id: int, fenced: bool, now: int) -> None:
        """BrokerHeartbeatManager.register."""
        s = self._sessions.get(broker_id)
        offset = s.metadata_offset if s is not None and s.fenced != fenced else -1
        self._touch(broker_id, fenced, offset, now)

    @staticmethod
    def _check_log_dirs(state: ControllerState, broker_id: int,
                        log_dirs: tuple[uuid.UUID, ...]) -> None:
        # Directory assignment is on from metadata.version 3.7-IV2 (every level Kafka
        # 4.3 formats), so the registration must name its log dirs.
        if not log_dirs:
            raise KafkaError(ErrorCode.invalid_registration, "No directories specified in request")
        if any(_reserved_dir(d) for d in log_dirs):
            raise KafkaError(ErrorCode.invalid_registration, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise KafkaError(ErrorCode.invalid_registration, "Duplicate directory ID in request")
        for other, r in state.registrations.items():
            if other != broker_id:
                for d in log_dirs:
                    if d in r.log_dirs:
                        raise KafkaError(ErrorCode.invalid_registration,
                                         f"Broker {other} is already registered with "
                                         f"directory {d}")

    @staticmethod
    def _check_features(state: ControllerState, request: AnyRequest
                        ) -> tuple[BrokerFeature, ...]:
        """ClusterControlManager.processRegistrationFeature over the request's features,
        then every finalized feature (level > 0) the broker left out, as range 0-0."""
        names = {f.name for f in request.features}
        if METADATA_VERSION not in names:
            raise KafkaError(ErrorCode.invalid_registration,
                             "Request features do not contain 'metadata.version'")
        ranges = [(f.name, f.min_supported_version, f.max_supported_version)
                  for f in request.features]
        ranges += [(name, 0, 0) for name, level in state.features.items()
                   if level != 0 and name not in names]
        for name, low, high in ranges:
            finalized = state.features.get(name, 1 if name == METADATA_VERSION else 0)
            if not low <= finalized <= high:
                raise KafkaError(ErrorCode.unsupported_version,
                                 f"Unable to register because the broker does not support "
                                 f"finalized version {finalized} of {name}. The broker wants "
                                 f"a version between {low} and {high}, inclusive.")
        return tuple(BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                   max_supported_version=f.max_supported_version)
                     for f in request.features)

    # -- BrokerHeartbeat v0-2 ----------------------------------------------------

    def heartbeat(self, state: ControllerState, request: AnyRequest, *,
                  offset: int, now: int) -> ControllerResult:
        """ReplicationControlManager.processBrokerHeartbeat. ``offset``: where the
        batch will land (the controlled shutdown offset is its last record's)."""
        response = _HEARTBEAT[request.__version__]
        broker_id = request.broker_id
        try:
            registration = check_broker_epoch(state, broker_id, request.broker_epoch)
        except KafkaError as e:
            logger.info("BrokerHeartbeat of broker %d refused: %s", broker_id, e.message)
            return ControllerResult((), response(
                throttle_time=NO_THROTTLE, error_code=e.error_code, is_caught_up=False,
                is_fenced=True, should_shut_down=False))
        session = self._sessions.get(broker_id)
        if session is None:  # registered before this controller's activate()
            session = self._sessions[broker_id] = BrokerHeartbeatState(
                broker_id, now, registration.fenced)
        current = session.control_state()
        nxt = self._next_state(session, request, registration.registered_offset, state)
        records: list[Message] = []
        if nxt != current:
            if nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                records += fence_records(state, broker_id)
            elif nxt == BrokerControlState.UNFENCED:
                records.append(BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=registration.epoch, fenced=-1))
                records += broker_changes.add_broker(state, broker_id)
            else:  # CONTROLLED_SHUTDOWN
                if not registration.in_controlled_shutdown:
                    records.append(BrokerRegistrationChangeRecord(
                        broker_id=broker_id, broker_epoch=registration.epoch,
                        in_controlled_shutdown=1))
                records += broker_changes.remove_broker(state, broker_id)
        fenced = nxt in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)
        self._touch(broker_id, fenced, request.current_metadata_offset, now)
        if nxt == BrokerControlState.CONTROLLED_SHUTDOWN and not session.shutting_down:
            # maybeUpdateControlledShutdownOffset, once: the broker may go when every
            # active broker has replayed past the records moving its leaderships.
            session.controlled_shutdown_offset = offset + len(records) - 1
        records += self._cordoned_change(registration, request)
        if nxt != current:
            logger.info("Broker %d: %s -> %s", broker_id, current.value, nxt.value)
        return ControllerResult(tuple(records), response(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            is_caught_up=request.current_metadata_offset >= registration.registered_offset,
            is_fenced=fenced,
            should_shut_down=nxt == BrokerControlState.SHUTDOWN_NOW))

    def _next_state(self, session: BrokerHeartbeatState, request: AnyRequest,
                    registered_offset: int, state: ControllerState) -> BrokerControlState:
        """BrokerHeartbeatManager.calculateNextBrokerState."""
        current = session.control_state()
        if current == BrokerControlState.FENCED:
            if request.want_shut_down:
                return BrokerControlState.SHUTDOWN_NOW
            if not request.want_fence and request.current_metadata_offset >= registered_offset:
                return BrokerControlState.UNFENCED
            return BrokerControlState.FENCED
        if current == BrokerControlState.UNFENCED:
            if request.want_fence:
                return BrokerControlState.SHUTDOWN_NOW if request.want_shut_down \
                    else BrokerControlState.FENCED
            if request.want_shut_down:
                if broker_changes.leads_partitions(state, session.broker_id):
                    return BrokerControlState.CONTROLLED_SHUTDOWN
                return BrokerControlState.SHUTDOWN_NOW
            return BrokerControlState.UNFENCED
        # CONTROLLED_SHUTDOWN
        if broker_changes.leads_partitions(state, session.broker_id):
            return BrokerControlState.CONTROLLED_SHUTDOWN
        if session.controlled_shutdown_offset <= self.lowest_active_offset():
            return BrokerControlState.SHUTDOWN_NOW
        return BrokerControlState.CONTROLLED_SHUTDOWN

    @staticmethod
    def _cordoned_change(registration: RegisteredBroker, request: AnyRequest) -> list[Message]:
        """v2's CordonedLogDirs (KIP-1066): a change is recorded as
        BrokerRegistrationChangeRecord v3; the first heartbeat of a 4.3 broker writes
        ``cordonedLogDirs: []`` over the registration's null (facts doc)."""
        cordoned = getattr(request, "cordoned_log_dirs", None)
        if cordoned is None:
            return []
        dirs = tuple(d for d in cordoned if d is not None)
        if dirs == registration.cordoned_log_dirs:
            return []
        return [BrokerRegistrationChangeRecord(
            broker_id=request.broker_id,
            broker_epoch=registration.epoch,
            cordoned_log_dirs=dirs)]

    # -- session expiry ------------------------------------------------------------

    def fence_one_stale_broker(self, state: ControllerState, now: int
                               ) -> ControllerResult[int | None]:
        """ReplicationControlManager.maybeFenceOneStaleBroker: one broker a call, so
        each fencing's elections see the previous one's."""
        broker_id = self.stale_broker(now)
        if broker_id is None or broker_id not in state.registrations:
            if broker_id is not None:
                self._sessions.pop(broker_id)
            return ControllerResult((), None)
        logger.info("Fencing broker %d because its session has timed out.", broker_id)
        records = fence_records(state, broker_id)
        self._sessions[broker_id].fenced = True
        self._sessions[broker_id].controlled_shutdown_offset = -1
        return ControllerResult(tuple(records), broker_id)

    # -- UnregisterBroker v0 ---------------------------------------------------------

    def unregister_broker(self, state: ControllerState, request: AnyRequest
                          ) -> ControllerResult:
        """ReplicationControlManager.unregisterBroker."""
        broker_id = request.broker_id
        registration = state.registrations.get(broker_id)
        if registration is None:
            return ControllerResult((), UnregisterBrokerResponse(
                throttle_time=NO_THROTTLE, error_code=ErrorCode.broker_id_not_registered,
                error_message=f"Broker ID {broker_id} is not currently registered"))
        records: list[Message] = [*broker_changes.remove_broker(state, broker_id),
                                  UnregisterBrokerRecord(broker_id=broker_id,
                                                         broker_epoch=registration.epoch)]
        self._sessions.pop(broker_id, None)
        return ControllerResult(tuple(records), UnregisterBrokerResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None))


def check_broker_epoch(state: ControllerState, broker_id: int, epoch: int
                       ) -> RegisteredBroker:
    """ClusterControlManager.checkBrokerEpoch: STALE_BROKER_EPOCH for an unknown broker
    as for a wrong epoch (4.3.1 answers a heartbeat of an unregistered broker so, not
    BROKER_ID_NOT_REGISTERED)."""
    registration = state.registrations.get(broker_id)
    if registration is None:
        raise KafkaError(ErrorCode.stale_broker_epoch,
                         f"No broker registration found for broker id {broker_id}")
    if registration.epoch != epoch:
        raise KafkaError(ErrorCode.stale_broker_epoch,
                         f"Expected broker epoch {registration.epoch}, but got broker "
                         f"epoch {epoch}")
    return registration


def fence_records(state: ControllerState, broker_id: int) -> list[Message]:
    """ReplicationControlManager.handleBrokerFenced: the ISR and leadership moves, then
    BrokerRegistrationChangeRecord fenced=1."""
    registration = state.registrations[broker_id]
    return [*broker_changes.remove_broker(state, broker_id),
            BrokerRegistrationChangeRecord(broker_id=broker_id,
                                           broker_epoch=registration.epoch, fenced=1)]


def _replace(record: RegisterBrokerRecord, **changes: object) -> RegisterBrokerRecord:
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]
