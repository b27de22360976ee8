"""SASL authentication: the ``auth_sasl`` plugin.

PLAIN against users of the ``[plugins.auth_sasl]`` table or a password file, and
SCRAM-SHA-256/512 (RFC 5802/7677) against salted credentials managed with
AlterUserScramCredentials and DescribeUserScramCredentials. The plugin serves
SaslHandshake and SaslAuthenticate for the kernel's SASL_* listeners.
"""

from __future__ import annotations

from plugins.auth_sasl.plugin import PLUGIN_NAME, AuthSaslPlugin

__all__ = ["PLUGIN_NAME", "AuthSaslPlugin"]
