"""The hooks: mark a plugin's implementations with ``@hookimpl``; the specs (their
names, arguments and docs) are below. A plugin is a module or a class (instantiated
once per broker)."""

from kernel.hookspecs import (
    CLUSTER_NAME,
    PROJECT,
    hookimpl,
    kafkernel_authorize,
    kafkernel_authorize_by_resource_type,
    kafkernel_config_schema,
    kafkernel_configure,
    kafkernel_connection_closed,
    kafkernel_connection_opened,
    kafkernel_high_watermark_changed,
    kafkernel_log_appended,
    kafkernel_metadata_backend,
    kafkernel_register_apis,
    kafkernel_register_coordinators,
    kafkernel_register_sasl_mechanisms,
    kafkernel_segment_rolled,
    kafkernel_shutdown,
    kafkernel_startup,
)

__all__ = [
    "CLUSTER_NAME",
    "PROJECT",
    "hookimpl",
    "kafkernel_authorize",
    "kafkernel_authorize_by_resource_type",
    "kafkernel_config_schema",
    "kafkernel_configure",
    "kafkernel_connection_closed",
    "kafkernel_connection_opened",
    "kafkernel_high_watermark_changed",
    "kafkernel_log_appended",
    "kafkernel_metadata_backend",
    "kafkernel_register_apis",
    "kafkernel_register_coordinators",
    "kafkernel_register_sasl_mechanisms",
    "kafkernel_segment_rolled",
    "kafkernel_shutdown",
    "kafkernel_startup",
]
