"""Glue over kio: request header decoding, codecs by (api_key, version), errors; and the
record batch format (records.py) with its compression, which the log and the
coordinators share."""
