"""Producer ids and transactions: the ``txn`` plugin.

Producer ids come from blocks the metadata backend hands out
(``MetadataBackend.allocate_producer_ids``), so no id is reused across restarts. The
transaction coordinator (``service.py``) runs on the kernel's coordinator runtime over
``__transaction_state``: one sans-io shard per partition (``shard.py``), Kafka's record
format (``records.py``), markers written through ``PluginServices.write_txn_markers``.
"""

from __future__ import annotations

from plugins.txn.plugin import PLUGIN_NAME, TxnPlugin

__all__ = ["PLUGIN_NAME", "TxnPlugin"]
