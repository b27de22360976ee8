"""The differential pair: the session's reference Kafka and a fresh Kafkernel broker."""

from __future__ import annotations

import pytest

from kernel.testing.embedded import EmbeddedBroker
from reference.kafka import ReferenceKafka
from tests.reference.diff import Pair, kafka_side, kafkernel_side


@pytest.fixture
def pair(reference_kafka: ReferenceKafka, broker: EmbeddedBroker) -> Pair:
    return Pair(kafka_side(reference_kafka), kafkernel_side(broker))
