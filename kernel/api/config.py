"""Declaring a plugin's settings: a frozen dataclass of ``setting(...)`` fields, returned
in a :class:`ConfigSchema` from ``kafkernel_config_schema``; the kernel validates the
plugin's table with the broker's rules and hands the built settings to
``kafkernel_configure``. :class:`BrokerConfig` is the broker's own (``broker.config``)."""

from kernel.config import (
    SASL_ENABLED_MECHANISMS,
    BrokerConfig,
    ConfigError,
    ConfigProblem,
    ConfigSchema,
    LoadedConfig,
    StartupError,
    at_least,
    between,
    controller_listeners,
    int_at_least,
    one_of,
    parse_voters,
    setting,
)

__all__ = [
    "SASL_ENABLED_MECHANISMS",
    "BrokerConfig",
    "ConfigError",
    "ConfigProblem",
    "ConfigSchema",
    "LoadedConfig",
    "StartupError",
    "at_least",
    "between",
    "controller_listeners",
    "int_at_least",
    "one_of",
    "parse_voters",
    "setting",
]
