"""Idempotent and transactional producers: the ``txn`` plugin.

This slice serves InitProducerId for idempotent producers: producer ids come from blocks
the metadata backend hands out (``MetadataBackend.allocate_producer_ids``), so no id is
reused across restarts. Transactional ids (the transaction coordinator, its
``__transaction_state`` topic, markers) are not served yet: InitProducerId with one
answers COORDINATOR_NOT_AVAILABLE after Kafka's checks of the request.
"""

from __future__ import annotations

from plugins.txn.plugin import PLUGIN_NAME, TxnPlugin

__all__ = ["PLUGIN_NAME", "TxnPlugin"]
