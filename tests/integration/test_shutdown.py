"""SIGTERM ends ``kafkernel serve`` promptly: the connections' requests already read are
answered, no new one is read, so a client that long-polls without pause (a consumer, a
follower) does not keep the broker waiting for the whole shutdown grace."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from tests.broker_process import BrokerProcess

# Without the fix the broker waited out its 5 s grace for a connection that was never
# idle; with it the broker stops in about 0.5 s (a parked Fetch's fetch.wait.max.ms).
# 3 s leaves a loaded 2-core machine room and still fails the old behaviour.
STOP_BOUND_S = 3.0


def test_sigterm_exits_promptly_with_a_consumer_polling(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for _ in range(10):
            producer.produce("polled", b"x" * 100)
        assert producer.flush(15) == 0
        consumed = threading.Event()
        done = threading.Event()

        def poll() -> None:
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                                 "auto.offset.reset": "earliest", "log_level": 0})
            consumer.subscribe(["polled"])
            while not done.is_set():
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    consumed.set()

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            assert consumed.wait(30), "the consumer got no record"
            time.sleep(1)  # it is long-polling Fetch now
            assert broker.proc is not None
            signalled = time.monotonic()
            broker.proc.send_signal(signal.SIGTERM)
            code = broker.proc.wait(30)
            took = time.monotonic() - signalled
        finally:
            done.set()
        assert code == 0
        assert broker.events()[-1].get("event") == "broker stopped", broker.log()[-2000:]
        assert took < STOP_BOUND_S, f"exited {took:.2f} s after SIGTERM"
