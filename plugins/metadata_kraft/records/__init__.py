"""Kafka's metadata records, byte for byte: the record schemas (``schema``), their
encoding (``codec``) and their place in the log's record batches (``serde``)."""
