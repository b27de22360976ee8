"""Kafkernel: a Kafka-compatible broker built as a microkernel."""

__version__ = "0.1.0"
