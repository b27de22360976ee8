"""Kafkernel's broker lifecycle (plugins/metadata_kraft/broker/) against Apache Kafka
4.3.1's controllers (issue 32, increment 7): one quorum of three controller-only nodes
(static voters) for the module, no Kafka broker. Our channel finds the active
controller from the bootstrap controllers; our lifecycle registers, is unfenced,
shuts down in a controlled way, and keeps its registration across the kill -9 of the
active controller.

The quorum is formatted with the features Kafkernel does not implement at level 0
(group/share/streams/ELR/transaction.version: see lifecycle.SUPPORTED_FEATURES).
CurrentMetadataOffset is the controller's high watermark here: the Raft observer will
supply the offset this broker replayed."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from plugins.metadata_kraft.broker.channel import (
    BootstrapControllerNodeProvider,
    ControllerChannel,
    plaintext_connect,
)
from plugins.metadata_kraft.broker.lifecycle import (
    SUPPORTED_FEATURES,
    BrokerLifecycleManager,
    BrokerLifecycleStoppedError,
    BrokerListener,
    BrokerRegistrationInfo,
    BrokerState,
)
from reference import kraft, tools
from reference.kafka import KafkaNotFetched

UNSUPPORTED = {"group.version": 0, "share.version": 0, "streams.version": 0,
               "eligible.leader.replicas.version": 0, "transaction.version": 0}
# A session shorter than Kafka's 9 s: the duplicate registration test waits one out.
SESSION = {"broker.session.timeout.ms": "3000"}
HEARTBEAT_S = 0.3  # Kafka's 2 s would make each test wait seconds per step
WAIT_S = 60.0  # generous: three JVMs and the test share two loaded cores
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _loggers_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # A logging.config.dictConfig elsewhere in the session disables existing loggers.
    for name in ("plugins.metadata_kraft.broker.lifecycle",
                 "plugins.metadata_kraft.broker.channel"):
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)


@pytest.fixture(scope="module")
def quorum() -> Iterator[kraft.KraftQuorum]:
    try:
        started = kraft.start_quorum(3, 0, voters="static", features=UNSUPPORTED,
                                     controller_overrides=SESSION)
    except KafkaNotFetched as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield started
    finally:
        started.stop()


class CountingSender:
    """The channel, counting what the lifecycle sends."""

    def __init__(self, channel: ControllerChannel) -> None:
        self.channel = channel
        self.registrations = 0
        self.heartbeats_answered = 0
        self.errors: list[ErrorCode] = []

    async def send(self, body: Any, timeout_s: float | None = None) -> Any:
        if isinstance(body, BrokerRegistrationRequest):
            self.registrations += 1
        response = await self.channel.send(body, timeout_s)
        self.errors.append(response.error_code)
        if isinstance(body, BrokerHeartbeatRequest) and response.error_code == ErrorCode.none:
            self.heartbeats_answered += 1
        return response


def _channel(quorum: kraft.KraftQuorum) -> ControllerChannel:
    provider = BootstrapControllerNodeProvider(quorum.controller_bootstrap.split(","),
                                               plaintext_connect(2.0))
    return ControllerChannel(provider, plaintext_connect(2.0), retry_backoff_s=0.02,
                             request_timeout_s=2.0)


def _high_watermark(quorum: kraft.KraftQuorum) -> Callable[[], int]:
    last = [0]

    def offset() -> int:
        answer = quorum.describe_quorum()
        if answer is not None:
            last[0] = int(answer.topics[0].partitions[0].high_watermark)
        return last[0]
    return offset


def _lifecycle(quorum: kraft.KraftQuorum, node_id: int, sender: Any, *,
               registration_timeout_s: float = WAIT_S,
               features: dict[str, tuple[int, int]] | None = None
               ) -> BrokerLifecycleManager:
    info = BrokerRegistrationInfo(
        node_id=node_id, cluster_id=quorum.cluster_id,
        listeners=[BrokerListener("PLAINTEXT", "127.0.0.1", 19000 + node_id, "PLAINTEXT")],
        log_dirs=[uuid.uuid4()], rack="r1",
        features=dict(SUPPORTED_FEATURES) if features is None else features)
    return BrokerLifecycleManager(info, sender, _high_watermark(quorum),
                                  heartbeat_interval_s=HEARTBEAT_S,
                                  initial_registration_timeout_s=registration_timeout_s,
                                  request_timeout_s=1.5)


async def _within(awaitable: Awaitable[T]) -> T:
    async with asyncio.timeout(WAIT_S):
        return await awaitable


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():
            await asyncio.sleep(0.05)


def test_registers_is_unfenced_and_shuts_down(quorum: kraft.KraftQuorum) -> None:
    async def scenario() -> tuple[BrokerLifecycleManager, list[BrokerState]]:
        channel = _channel(quorum)
        lifecycle = _lifecycle(quorum, 1, channel)
        states = []
        try:
            lifecycle.start()
            await _within(lifecycle.wait_caught_up())
            states.append(lifecycle.state)  # RECOVERY: fenced until ready
            lifecycle.set_ready_to_unfence()
            await _within(lifecycle.wait_unfenced())
            states.append(lifecycle.state)
            # The controller's answer: unfenced.
            answer = await channel.send(lifecycle.heartbeat_request())
            assert answer.error_code == ErrorCode.none and not answer.is_fenced
            lifecycle.begin_controlled_shutdown()
            states.append(lifecycle.state)
            await _within(lifecycle.wait_may_shut_down())
            states.append(lifecycle.state)
            # A heartbeat with another epoch than the registration's.
            stale = await channel.send(BrokerHeartbeatRequest(
                broker_id=BrokerId(1), broker_epoch=i64(lifecycle.broker_epoch + 1000),
                current_metadata_offset=i64(0), want_fence=False, want_shut_down=False))
            assert stale.error_code == ErrorCode.stale_broker_epoch
            # One for an id never registered: 4.3.1 says STALE_BROKER_EPOCH too.
            unknown = await channel.send(BrokerHeartbeatRequest(
                broker_id=BrokerId(77), broker_epoch=i64(5), current_metadata_offset=i64(0),
                want_fence=False, want_shut_down=False))
            assert unknown.error_code == ErrorCode.stale_broker_epoch
        finally:
            await lifecycle.close()
            channel.close()
        return lifecycle, states

    lifecycle, states = asyncio.run(scenario())
    assert states == [BrokerState.RECOVERY, BrokerState.RUNNING,
                      BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN]
    assert lifecycle.failure is None and lifecycle.broker_epoch > 0

    # What the controllers wrote: our registration, fenced, then unfenced.
    leader = quorum.node(quorum.wait_for_leader())
    dumped = tools.dump_log(*sorted(leader.metadata_dir.glob("*.log")))
    assert dumped.returncode == 0, dumped.stderr
    registered = [line for line in dumped.stdout.splitlines()
                  if '"type":"REGISTER_BROKER_RECORD"' in line.replace(" ", "")]
    assert len(registered) == 1, dumped.stdout[-3000:]
    record = registered[0].replace(" ", "")
    assert f'"brokerEpoch":{lifecycle.broker_epoch}' in record
    assert '"brokerId":1' in record and '"rack":"r1"' in record
    assert '"name":"metadata.version","minSupportedVersion":7,"maxSupportedVersion":30' \
        in record
    assert re.search(r'"fenced":-1', dumped.stdout.replace(" ", "")), "never unfenced"


def test_duplicate_registration_waits_out_the_old_session(
        quorum: kraft.KraftQuorum, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "plugins.metadata_kraft.broker")

    async def scenario() -> tuple[int, int, CountingSender]:
        channel = _channel(quorum)
        first = _lifecycle(quorum, 3, channel)
        sender = CountingSender(channel)
        second = _lifecycle(quorum, 3, sender)  # another incarnation of broker 3
        try:
            first.start()
            await _within(first.wait_caught_up())
            second.start()
            await _until(lambda: ErrorCode.duplicate_broker_registration in sender.errors)
            assert not second.registered
            await first.close()  # its session expires after broker.session.timeout.ms
            await _within(second.wait_caught_up())
            return first.broker_epoch, second.broker_epoch, sender
        finally:
            await first.close()
            await second.close()
            channel.close()

    first_epoch, second_epoch, sender = asyncio.run(scenario())
    assert second_epoch > first_epoch
    refused = sender.errors.count(ErrorCode.duplicate_broker_registration)
    warned = [r for r in caplog.records if "DUPLICATE_BROKER_REGISTRATION" in r.getMessage()
              and r.levelno == logging.WARNING]
    assert len(warned) == 1, (refused, [r.getMessage() for r in warned])


def test_unsupported_feature_range_refused_until_timeout(
        quorum: kraft.KraftQuorum, caplog: pytest.LogCaptureFixture) -> None:
    """A broker whose metadata.version range lacks the finalized level (30) is refused;
    the lifecycle gives up after initial.broker.registration.timeout.ms."""
    caplog.set_level(logging.INFO, "plugins.metadata_kraft.broker")

    async def scenario() -> tuple[BrokerLifecycleManager, CountingSender, str]:
        channel = _channel(quorum)
        sender = CountingSender(channel)
        lifecycle = _lifecycle(quorum, 4, sender, registration_timeout_s=2.0,
                               features={**SUPPORTED_FEATURES, "metadata.version": (7, 29)})
        try:
            lifecycle.start()
            with pytest.raises(BrokerLifecycleStoppedError) as stopped:
                await _within(lifecycle.wait_unfenced())
            return lifecycle, sender, str(stopped.value)
        finally:
            await lifecycle.close()
            channel.close()

    lifecycle, sender, why = asyncio.run(scenario())
    assert lifecycle.state == BrokerState.SHUTTING_DOWN and not lifecycle.registered
    assert "initial.broker.registration.timeout.ms" in why
    assert sender.errors and set(sender.errors) == {ErrorCode.unsupported_version}
    assert any("UNSUPPORTED_VERSION" in r.getMessage() and "metadata.version 7-29"
               in r.getMessage() for r in caplog.records)


def test_active_controller_killed_heartbeats_go_on(quorum: kraft.KraftQuorum) -> None:
    async def scenario() -> tuple[int, int, CountingSender, int, int]:
        channel = _channel(quorum)
        sender = CountingSender(channel)
        lifecycle = _lifecycle(quorum, 2, sender)
        try:
            lifecycle.start()
            lifecycle.set_ready_to_unfence()
            await _within(lifecycle.wait_unfenced())
            epoch = lifecycle.broker_epoch
            old = channel.controller
            assert old is not None
            await asyncio.to_thread(quorum.node(old.node_id).kill)
            new_leader = await asyncio.to_thread(quorum.wait_for_leader, WAIT_S, old.node_id)
            answered = sender.heartbeats_answered
            await _until(lambda: sender.heartbeats_answered >= answered + 3 and
                         channel.controller is not None and
                         channel.controller.node_id != old.node_id)
            assert lifecycle.state == BrokerState.RUNNING
            now = channel.controller
            assert now is not None
            return epoch, lifecycle.broker_epoch, sender, now.node_id, new_leader
        finally:
            await lifecycle.close()
            channel.close()

    before, after, sender, controller, leader = asyncio.run(scenario())
    assert after == before  # no re-registration: the same broker epoch
    assert sender.registrations == 1
    assert controller == leader
