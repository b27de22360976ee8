"""The SASL mechanisms a broker offers, per listener, as plugins registered them.

Plugins add mechanisms through the ``kafkernel_register_sasl_mechanisms`` hook, each
through its own ``SaslMechanismRegistry`` view, so every mechanism names its plugin.
SaslHandshake answers a connection with the mechanisms of its listener; a SASL_*
listener that has none cannot authenticate anyone, so the broker refuses to start it.
The kernel keeps the table; what a mechanism's factory makes (the server side of the
exchange) is between the plugin and its SaslAuthenticate handler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# RFC 4422 3.1: 1 to 20 characters of A-Z, 0-9, "-" and "_".
_MECHANISM_NAME = re.compile(r"[A-Z0-9_-]{1,20}")


class SaslError(Exception):
    """A registration that cannot be honoured; startup stops with this message."""


@dataclass(frozen=True, slots=True)
class SaslMechanism:
    name: str
    factory: object
    owner: str


class SaslMechanisms:
    """One broker's mechanisms per SASL listener, in registration order."""

    def __init__(self, sasl_listeners: Iterable[str]) -> None:
        self._by_listener: dict[str, dict[str, SaslMechanism]] = {
            name: {} for name in sasl_listeners
        }
        self._by_name: dict[str, SaslMechanism] = {}

    @property
    def listeners(self) -> tuple[str, ...]:
        """The names of the broker's SASL_* listeners."""
        return tuple(self._by_listener)

    def registry_for(self, owner: str) -> SaslMechanismRegistry:
        return SaslMechanismRegistry(self, owner)

    def add(self, mechanism: SaslMechanism, listeners: Iterable[str] | None) -> None:
        name, owner = mechanism.name, mechanism.owner
        if not _MECHANISM_NAME.fullmatch(name):
            raise SaslError(
                f"plugin {owner!r} registers SASL mechanism {name!r}; a mechanism name is "
                "1 to 20 characters of A-Z, 0-9, - and _ (RFC 4422)"
            )
        existing = self._by_name.get(name)
        if existing is not None:
            raise SaslError(
                f"SASL mechanism {name} is registered by both plugin {existing.owner!r} and "
                f"plugin {owner!r}; enable only one of them"
            )
        targets = self.listeners if listeners is None else [n.upper() for n in listeners]
        for listener in targets:
            if listener not in self._by_listener:
                raise SaslError(
                    f"plugin {owner!r} registers SASL mechanism {name} for listener "
                    f"{listener}, which is not a SASL listener; SASL listeners: "
                    f"{', '.join(self.listeners) or 'none'}"
                )
        self._by_name[name] = mechanism
        for listener in targets:
            self._by_listener[listener][name] = mechanism

    def for_listener(self, listener_name: str) -> Mapping[str, SaslMechanism]:
        """Mechanism name -> mechanism offered on ``listener_name`` (empty for a listener
        that is not SASL)."""
        return self._by_listener.get(listener_name, {})

    def without_mechanisms(self) -> list[str]:
        return [name for name, found in self._by_listener.items() if not found]


class SaslMechanismRegistry:
    """One plugin's view of the broker's SASL mechanisms: what it registers is its own."""

    __slots__ = ("_mechanisms", "owner")

    def __init__(self, mechanisms: SaslMechanisms, owner: str) -> None:
        self._mechanisms = mechanisms
        self.owner = owner

    @property
    def listeners(self) -> tuple[str, ...]:
        """The broker's SASL_* listener names, for a plugin that offers a mechanism on
        some of them only."""
        return self._mechanisms.listeners

    def register(self, mechanism: str, factory: object, *,
                 listeners: Iterable[str] | None = None) -> None:
        """Offer ``mechanism`` (``PLAIN``, ``SCRAM-SHA-256``, ...) on ``listeners`` (names;
        default every SASL listener). A name another plugin registered stops startup."""
        self._mechanisms.add(SaslMechanism(mechanism, factory, self.owner), listeners)
