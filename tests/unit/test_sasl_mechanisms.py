"""The broker's SASL mechanisms: per SASL listener, attributed to the plugin whose view
registered them, and refused when they cannot be honoured."""

from __future__ import annotations

import pytest

from kernel.sasl import SaslError, SaslMechanisms


def test_mechanisms_are_kept_per_listener_and_owner() -> None:
    mechanisms = SaslMechanisms(["INTERNAL", "EXTERNAL"])
    mechanisms.registry_for("a").register("PLAIN", object)
    b = mechanisms.registry_for("b")
    assert b.listeners == ("INTERNAL", "EXTERNAL")
    b.register("SCRAM-SHA-256", object, listeners=["external"])
    assert list(mechanisms.for_listener("INTERNAL")) == ["PLAIN"]
    external = mechanisms.for_listener("EXTERNAL")
    assert [(m.name, m.owner) for m in external.values()] == [("PLAIN", "a"),
                                                              ("SCRAM-SHA-256", "b")]
    assert not mechanisms.for_listener("PLAINTEXT")
    assert mechanisms.without_mechanisms() == []


def test_registrations_that_cannot_be_honoured() -> None:
    mechanisms = SaslMechanisms(["SASL_PLAINTEXT"])
    assert mechanisms.without_mechanisms() == ["SASL_PLAINTEXT"]
    mechanisms.registry_for("a").register("PLAIN", object)
    with pytest.raises(SaslError, match="PLAIN is registered by both plugin 'a' and plugin 'b'"):
        mechanisms.registry_for("b").register("PLAIN", object)
    with pytest.raises(SaslError, match="'plain'; a mechanism name is 1 to 20 characters"):
        mechanisms.registry_for("b").register("plain", object)
    with pytest.raises(SaslError, match="for listener PLAINTEXT, which is not a SASL listener; "
                                        "SASL listeners: SASL_PLAINTEXT"):
        mechanisms.registry_for("b").register("OAUTHBEARER", object, listeners=["PLAINTEXT"])
    assert list(mechanisms.for_listener("SASL_PLAINTEXT")) == ["PLAIN"]
