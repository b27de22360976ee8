"""The ``[plugins.txn]`` table: Kafka's broker config names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from kernel.api.config import int_at_least, setting

__all__ = ["TxnSettings"]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    transaction_max_timeout_ms: int = setting(
        "transaction.max.timeout.ms", 900000,
        "The largest transaction timeout a transactional producer may ask for in "
        "InitProducerId; a larger one is answered INVALID_TRANSACTION_TIMEOUT.",
        check=int_at_least(1),
    )
    transaction_state_log_num_partitions: int = setting(
        "transaction.state.log.num.partitions", 50,
        "Partitions of the __transaction_state topic (created by the first FindCoordinator "
        "for a transactional id, as Kafka does).",
        check=int_at_least(1),
    )
    transaction_state_log_replication_factor: int = setting(
        "transaction.state.log.replication.factor", 3,
        "Replication factor of __transaction_state, capped at the brokers registered "
        "when it is created.", check=int_at_least(1),
    )
    transaction_state_log_segment_bytes: int = setting(
        "transaction.state.log.segment.bytes", 104857600,
        "segment.bytes of __transaction_state.", check=int_at_least(1),
    )
    transaction_state_log_min_isr: int = setting(
        "transaction.state.log.min.isr", 2,
        "min.insync.replicas of __transaction_state (capped at its replication factor).",
        check=int_at_least(1),
    )
    transactional_id_expiration_ms: int = setting(
        "transactional.id.expiration.ms", 604800000,
        "How long a transactional id without a transaction in progress is kept after its "
        "last update.", check=int_at_least(1),
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000,
        "How often transactions past their timeout are aborted.", check=int_at_least(1),
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms", 3600000,
        "How often expired transactional ids are removed.", check=int_at_least(1),
    )
