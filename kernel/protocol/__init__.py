"""Glue over kio: request header decoding, codecs by (api_key, version), errors."""
