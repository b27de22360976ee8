"""The broker lifecycle's state machine (plugins/metadata_kraft/broker/lifecycle.py) rule
by rule, its task against a scripted controller, and the controller channel against
loopback controllers that move: NOT_CONTROLLER and a dead controller send it looking
again, within the request's deadline. Kafka's own controllers: tests/reference/
test_kraft_broker_lifecycle.py."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_heartbeat.v1.response import BrokerHeartbeatResponse
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.broker_registration.v4.response import BrokerRegistrationResponse
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kernel.config import load_config
from kernel.protocol.codec import default_entity, encode_response
from plugins.metadata_kraft.broker.channel import (
    BootstrapControllerNodeProvider,
    ControllerChannel,
    ControllerUnavailableError,
    bootstrap_controllers,
    channel_for,
    plaintext_connect,
)
from plugins.metadata_kraft.broker.lifecycle import (
    FIRST_SHUTDOWN_HEARTBEAT_S,
    STARTING_HEARTBEAT_S,
    BrokerLifecycleManager,
    BrokerLifecycleStoppedError,
    BrokerListener,
    BrokerRegistrationInfo,
    BrokerState,
    lifecycle_for,
)

INTERVAL_S = 2.0
NO_WAIT = datetime.timedelta(0)


@pytest.fixture(autouse=True)
def _loggers_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # A logging.config.dictConfig elsewhere in the session disables existing loggers.
    for name in ("plugins.metadata_kraft.broker.lifecycle",
                 "plugins.metadata_kraft.broker.channel"):
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _info(**changes: Any) -> BrokerRegistrationInfo:
    values: dict[str, Any] = {
        "node_id": 1, "cluster_id": "c1",
        "listeners": [BrokerListener("EXTERNAL", "h", 9093, "SASL_SSL"),
                      BrokerListener("PLAINTEXT", "h", 9092, "PLAINTEXT")],
        "log_dirs": [uuid.UUID(int=9), uuid.UUID(int=300)], "rack": "r"}
    values.update(changes)
    return BrokerRegistrationInfo(**values)


def _manager(sender: Any = None, *, clock: Callable[[], float] | None = None,
             interval_s: float = INTERVAL_S, registration_timeout_s: float = 60.0,
             offset: Callable[[], int] = lambda: 42) -> BrokerLifecycleManager:
    return BrokerLifecycleManager(_info(), sender, offset, heartbeat_interval_s=interval_s,
                                  initial_registration_timeout_s=registration_timeout_s,
                                  request_timeout_s=1.0, clock=clock or Clock())


def _registered(epoch: int = 7, error: ErrorCode = ErrorCode.none
                ) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(throttle_time=i32Timedelta.parse(NO_WAIT),
                                      error_code=error, broker_epoch=i64(epoch))


def _beat(error: ErrorCode = ErrorCode.none, *, caught_up: bool = True, fenced: bool = True,
          shut_down: bool = False) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(throttle_time=i32Timedelta.parse(NO_WAIT),
                                   error_code=error, is_caught_up=caught_up,
                                   is_fenced=fenced, should_shut_down=shut_down)


def _running() -> BrokerLifecycleManager:
    manager = _manager()
    manager.state = BrokerState.STARTING
    manager.on_registration(_registered())
    manager.on_heartbeat(_beat())
    manager.set_ready_to_unfence()
    manager.on_heartbeat(_beat(fenced=False))
    assert manager.state == BrokerState.RUNNING
    return manager


def test_registration_request_carries_what_kafka_registers() -> None:
    manager = _manager()
    request = manager.registration_request()
    assert request.broker_id == 1 and request.cluster_id == "c1"
    assert request.incarnation_id == manager.incarnation_id
    assert [(li.name, li.port, li.security_protocol) for li in request.listeners] == [
        ("EXTERNAL", 9093, 3), ("PLAINTEXT", 9092, 0)]
    assert {f.name: (f.min_supported_version, f.max_supported_version)
            for f in request.features} == {
        "metadata.version": (7, 30), "kraft.version": (0, 1),
        "eligible.leader.replicas.version": (0, 0), "group.version": (0, 0),
        "share.version": (0, 0), "streams.version": (0, 0), "transaction.version": (0, 0)}
    assert list(request.log_dirs) == [uuid.UUID(int=9), uuid.UUID(int=300)]
    assert request.rack == "r" and request.previous_broker_epoch == -1
    assert _manager().incarnation_id != manager.incarnation_id  # one per process


def test_bad_registration_info_is_refused() -> None:
    with pytest.raises(ValueError, match="log dir"):
        BrokerLifecycleManager(_info(log_dirs=[]), None, lambda: 0, heartbeat_interval_s=1,
                               initial_registration_timeout_s=1, request_timeout_s=1)
    with pytest.raises(ValueError, match="security protocol 'TLS'"):
        BrokerLifecycleManager(_info(listeners=[BrokerListener("A", "h", 1, "TLS")]), None,
                               lambda: 0, heartbeat_interval_s=1,
                               initial_registration_timeout_s=1, request_timeout_s=1)


def test_starting_recovery_running() -> None:
    manager = _manager()
    manager.state = BrokerState.STARTING
    assert isinstance(manager.next_request(), BrokerRegistrationRequest)
    assert manager.on_registration(_registered(epoch=7)) == 0.0  # heartbeat at once
    beat = manager.next_request()
    assert isinstance(beat, BrokerHeartbeatRequest)
    assert (beat.broker_epoch, beat.current_metadata_offset, beat.want_fence,
            beat.want_shut_down) == (7, 42, True, False)
    assert manager.on_heartbeat(_beat(caught_up=False)) == STARTING_HEARTBEAT_S
    assert manager.state == BrokerState.STARTING
    assert manager.on_heartbeat(_beat(caught_up=True)) == STARTING_HEARTBEAT_S
    assert manager.state == BrokerState.RECOVERY
    # Fenced until the broker is ready and the controller agrees.
    assert manager.on_heartbeat(_beat()) == INTERVAL_S
    assert manager.state == BrokerState.RECOVERY
    manager.set_ready_to_unfence()
    assert manager.heartbeat_request().want_fence is False
    manager.on_heartbeat(_beat(fenced=False))
    assert manager.state == BrokerState.RUNNING


def test_controlled_shutdown_waits_for_should_shut_down() -> None:
    manager = _running()
    manager.begin_controlled_shutdown()
    assert manager.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    assert manager.heartbeat_request().want_shut_down is True
    assert manager.on_heartbeat(_beat(fenced=False)) == FIRST_SHUTDOWN_HEARTBEAT_S
    assert manager.on_heartbeat(_beat(fenced=False)) == INTERVAL_S
    manager.on_heartbeat(_beat(fenced=False, shut_down=True))
    assert manager.state == BrokerState.SHUTTING_DOWN


def test_controlled_shutdown_before_running_stops_at_once() -> None:
    manager = _manager()
    manager.state = BrokerState.RECOVERY
    manager.begin_controlled_shutdown()
    assert manager.state == BrokerState.SHUTTING_DOWN


def test_errors_keep_the_state_and_log_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "plugins.metadata_kraft.broker")
    manager = _running()
    for _ in range(3):
        assert manager.on_heartbeat(_beat(ErrorCode.stale_broker_epoch)) == INTERVAL_S
    assert manager.state == BrokerState.RUNNING and manager.registered
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "STALE_BROKER_EPOCH" in warned[0].getMessage()
    # Kafka's metadata publisher asks for a new registration; the same incarnation.
    manager.resend_registration()
    assert isinstance(manager.next_request(), BrokerRegistrationRequest)
    manager2 = _manager()
    manager2.state = BrokerState.STARTING
    assert manager2.on_registration(_registered(
        error=ErrorCode.duplicate_broker_registration)) == INTERVAL_S
    assert not manager2.registered and manager2.state == BrokerState.STARTING


def test_state_changes_log_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "plugins.metadata_kraft.broker")
    manager = _running()
    manager.begin_controlled_shutdown()
    manager.on_heartbeat(_beat(fenced=False, shut_down=True))
    lines = [r.getMessage() for r in caplog.records if "is now" in r.getMessage()]
    assert [line.split(" is now ")[1].split(" ")[0] for line in lines] == [
        "RECOVERY", "RUNNING", "PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"]


def test_registration_times_out() -> None:
    clock = Clock()
    manager = _manager(clock=clock, registration_timeout_s=60.0)
    manager._registration_deadline = clock.now + 60.0
    manager.state = BrokerState.STARTING
    clock.now += 59.9
    assert not manager.check_registration_timeout()
    clock.now += 0.2
    assert manager.check_registration_timeout()
    assert manager.state == BrokerState.SHUTTING_DOWN
    assert manager.failure is not None and "60000 ms" in manager.failure


class ScriptedController:
    """Answers the lifecycle's requests as a controller would: registers, reports
    caught up, unfences when asked, lets it shut down; records each request."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.unreachable = False

    async def send(self, body: Any, timeout_s: float | None = None) -> Any:
        self.requests.append(body)
        if self.unreachable:
            raise ControllerUnavailableError("nobody home")
        if isinstance(body, BrokerRegistrationRequest):
            return _registered(epoch=11)
        return _beat(fenced=body.want_fence, shut_down=body.want_shut_down)


def test_task_registers_unfences_and_shuts_down() -> None:
    async def run() -> tuple[ScriptedController, BrokerLifecycleManager, float]:
        controller = ScriptedController()
        # A long interval: each step below happens only because the task woke up.
        manager = _manager(controller, interval_s=30.0, clock=asyncio.get_running_loop().time)
        manager.start()
        async with asyncio.timeout(5):
            await manager.wait_caught_up()
            while len(controller.requests) < 3:  # a fenced heartbeat in RECOVERY
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)  # the task now waits out its interval
            began = asyncio.get_running_loop().time()
            manager.set_ready_to_unfence()
            await manager.wait_unfenced()
            woke_after = asyncio.get_running_loop().time() - began
            manager.begin_controlled_shutdown()
            await manager.wait_may_shut_down()
        await manager.close()
        return controller, manager, woke_after

    controller, manager, woke_after = asyncio.run(run())
    assert woke_after < 5.0  # not the 30 s interval
    assert manager.state == BrokerState.SHUTTING_DOWN and manager.broker_epoch == 11
    kinds = [type(r).__name__ for r in controller.requests]
    assert kinds[0] == "BrokerRegistrationRequest" and kinds.count(kinds[0]) == 1
    assert controller.requests[-1].want_shut_down is True


def test_task_gives_up_when_no_controller_answers() -> None:
    async def run() -> tuple[ScriptedController, BrokerLifecycleManager, str]:
        controller = ScriptedController()
        controller.unreachable = True
        manager = _manager(controller, interval_s=0.05, registration_timeout_s=0.3,
                           clock=asyncio.get_running_loop().time)
        manager.start()
        async with asyncio.timeout(5):
            with pytest.raises(BrokerLifecycleStoppedError) as stopped:
                await manager.wait_unfenced()
        await manager.close()
        return controller, manager, str(stopped.value)

    controller, manager, why = asyncio.run(run())
    assert len(controller.requests) >= 2  # it retried
    assert manager.state == BrokerState.SHUTTING_DOWN and "could not register" in why


class FakeController:
    """A loopback controller: DescribeCluster names ``self.active`` (a FakeController)
    among ``self.peers``; BrokerHeartbeat answers NOT_CONTROLLER unless it is active."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.active: FakeController | None = None
        self.peers: list[FakeController] = []
        self.heartbeats = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> FakeController:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                writer.write(encode_response(api_key, version, correlation_id,
                                             self._answer(api_key)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    def _answer(self, api_key: int) -> Any:
        if api_key == 60:
            active = self.active
            return default_entity(
                DescribeClusterResponse, error_code=ErrorCode.none, cluster_id="c1",
                endpoint_type=i8(2), controller_id=BrokerId(active.node_id if active else -1),
                brokers=tuple(DescribeClusterBroker(broker_id=BrokerId(p.node_id),
                                                    host="127.0.0.1", port=i32(p.port))
                              for p in self.peers))
        if api_key == 55:  # DescribeQuorum: not the leader
            return default_entity(DescribeQuorumResponse,
                                  error_code=ErrorCode.not_leader_or_follower,
                                  topics=(), nodes=())
        self.heartbeats += 1
        error = ErrorCode.none if self.active is self else ErrorCode.not_controller
        return _beat(error, fenced=False)

    async def stop(self) -> None:
        """As a kill -9: the listener and every connection close."""
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()


BEAT = BrokerHeartbeatRequest(broker_id=BrokerId(1), broker_epoch=i64(7),
                              current_metadata_offset=i64(1), want_fence=False,
                              want_shut_down=False)


def _controller_channel(*controllers: FakeController) -> ControllerChannel:
    provider = BootstrapControllerNodeProvider(
        [f"127.0.0.1:{c.port}" for c in controllers], plaintext_connect(1.0))
    return ControllerChannel(provider, plaintext_connect(1.0), retry_backoff_s=0.02,
                             request_timeout_s=2.0)


def test_channel_follows_not_controller_and_a_dead_controller() -> None:
    async def run() -> None:
        a, b, c = [await FakeController(i).start() for i in (1, 2, 3)]
        for node in (a, b, c):
            node.peers, node.active = [a, b, c], a
        channel = _controller_channel(b, c)
        try:
            assert (await channel.send(BEAT)).error_code == ErrorCode.none
            assert channel.controller is not None and channel.controller.node_id == 1
            # a steps down: it answers NOT_CONTROLLER, the others name b.
            for node in (a, b, c):
                node.active = b
            assert (await channel.send(BEAT)).error_code == ErrorCode.none
            assert channel.controller.node_id == 2 and a.heartbeats == 2
            # b dies; c takes over.
            await b.stop()
            for node in (a, c):
                node.active = c
            c.peers = [a, c]
            assert (await channel.send(BEAT)).error_code == ErrorCode.none
            assert channel.controller.node_id == 3
        finally:
            channel.close()
            for node in (a, c):
                await node.stop()

    asyncio.run(run())


def test_channel_gives_up_at_the_deadline() -> None:
    async def run() -> float:
        lone = await FakeController(1).start()
        lone.peers = [lone]  # names no active controller
        channel = _controller_channel(lone)
        began = asyncio.get_running_loop().time()
        try:
            with pytest.raises(ControllerUnavailableError, match="BrokerHeartbeatRequest"):
                await channel.send(BEAT, timeout_s=0.3)
        finally:
            channel.close()
            await lone.stop()
        return asyncio.get_running_loop().time() - began

    assert asyncio.run(run()) < 2.0


def test_built_with_kafkas_settings() -> None:
    config = load_config(None, extra={
        "process.roles": "broker", "node.id": 4, "listeners": "PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": "1@c1:9093,2@c2:9094",
        "controller.quorum.retry.backoff.ms": 70, "broker.heartbeat.interval.ms": 500,
        "broker.session.timeout.ms": 4000,
        "initial.broker.registration.timeout.ms": 9000}).broker
    assert bootstrap_controllers(config) == ["c1:9093", "c2:9094"]
    channel = channel_for(config)
    assert (channel._retry_backoff_s, channel._request_timeout_s) == (0.07, 2.0)
    manager = lifecycle_for(config, _info(), channel, lambda: 0)
    assert (manager._interval_s, manager._initial_timeout_s,
            manager._request_timeout_s) == (0.5, 9.0, 2.0)
    with_bootstrap = load_config(None, extra={
        "process.roles": "broker", "node.id": 4, "listeners": "PLAINTEXT://127.0.0.1:9092",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.bootstrap.servers": "c1:9093,c3:9095"}).broker
    assert bootstrap_controllers(with_bootstrap) == ["c1:9093", "c3:9095"]
