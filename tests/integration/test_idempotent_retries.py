"""A real idempotent producer (confluent-kafka) whose first Produce answer never arrives:
a proxy between it and the broker forwards the request, so the broker appends, then
closes the connection instead of passing the answer on. librdkafka reconnects and sends
the same batch again; the broker must acknowledge it without appending it twice."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kernel.testing.embedded import EmbeddedBroker
from tests.broker_process import free_port
from tests.integration.test_produce_fetch import create_topic

PRODUCE = 0
RECORDS = 50


class DropFirstProduceAnswer:
    """A TCP proxy to the broker that closes the connection carrying the first Produce
    response (after the broker answered it) instead of forwarding that response."""

    def __init__(self, listen_port: int) -> None:
        self.server = socket.create_server(("127.0.0.1", listen_port))
        self.target: tuple[str, int] | None = None
        self.dropped = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            assert self.target is not None
            upstream = socket.create_connection(self.target)
            produce_ids: set[int] = set()
            threading.Thread(target=self._pipe, daemon=True,
                             args=(client, upstream, produce_ids, True)).start()
            threading.Thread(target=self._pipe, daemon=True,
                             args=(upstream, client, produce_ids, False)).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, produce_ids: set[int],
              requests: bool) -> None:
        try:
            while True:
                head = _read(src, 4)
                body = _read(src, struct.unpack(">i", head)[0])
                if requests:
                    api_key, _version, correlation_id = struct.unpack_from(">hhi", body)
                    if api_key == PRODUCE:
                        produce_ids.add(correlation_id)
                else:
                    (correlation_id,) = struct.unpack_from(">i", body)
                    with self._lock:
                        drop = correlation_id in produce_ids and not self.dropped.is_set()
                        if drop:
                            self.dropped.set()
                    if drop:
                        break
                dst.sendall(head + body)
        except (OSError, ConnectionError):
            pass
        for s in (src, dst):
            # shutdown, not only close: the other direction's thread is blocked in recv
            # on these sockets, and a close alone sends no FIN while it is.
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.server.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


@pytest.fixture
def proxied(broker_factory: Callable[..., EmbeddedBroker]) -> Iterator[
        tuple[EmbeddedBroker, DropFirstProduceAnswer]]:
    port = free_port()
    proxy = DropFirstProduceAnswer(port)
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    host, broker_port = broker.bootstrap.rsplit(":", 1)
    proxy.target = (host, int(broker_port))
    yield broker, proxy
    proxy.close()


def test_a_batch_resent_after_a_lost_answer_is_stored_once(
        proxied: tuple[EmbeddedBroker, DropFirstProduceAnswer]) -> None:
    broker, proxy = proxied
    topic = "idempotent-lost-answer"
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.server.getsockname()[1]}",
                         "enable.idempotence": True, "linger.ms": 50,
                         "message.timeout.ms": 30_000})
    delivered: list[int] = []
    for i in range(RECORDS):
        producer.produce(topic, value=b"v%d" % i, partition=0,
                         on_delivery=lambda err, msg: delivered.append(
                             -1 if err else msg.offset()))
    assert producer.flush(30) == 0
    assert proxy.dropped.is_set(), "no Produce answer was dropped: the test proves nothing"
    assert sorted(delivered) == list(range(RECORDS))

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "retries",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, RECORDS)  # each record once, none appended twice
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        while len(seen) < RECORDS:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            seen.append(msg.value())
        assert seen == [b"v%d" % i for i in range(RECORDS)]
    finally:
        consumer.close()
