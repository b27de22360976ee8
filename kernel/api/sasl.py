"""The SASL mechanism registry a plugin offers mechanisms through
(``kafkernel_register_sasl_mechanisms``), per SASL listener."""

from kernel.sasl import SaslMechanismRegistry

__all__ = ["SaslMechanismRegistry"]
