"""A complete small plugin: it serves DescribeClientQuotas (API key 48), which the kernel
does not, answering with one default-user quota taken from its own TOML table.

Enable it with
    [plugins]
    enabled = ["metadata_kraft", "tests.plugins.hello_plugin:HelloPlugin"]
    [plugins."tests.plugins.hello_plugin:HelloPlugin"]
    producer_byte_rate = 1048576
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.config import ConfigSchema, at_least, setting
from kernel.hookspecs import hookimpl
from kernel.protocol.build import response_module
from kernel.requests import ApiRegistry, RequestContext

NAME = "tests.plugins.hello_plugin:HelloPlugin"
DESCRIBE_CLIENT_QUOTAS = 48


@dataclass(frozen=True, slots=True)
class HelloSettings:
    producer_byte_rate: float = setting(
        "producer_byte_rate", 1048576.0, "Quota reported for the default user.",
        check=at_least(0),
    )


class HelloPlugin:
    """Instantiated once per broker: state lives on the instance."""

    def __init__(self) -> None:
        self.settings = HelloSettings()
        self.requests_served = 0

    @hookimpl
    def kafkernel_config_schema(self) -> ConfigSchema:
        return ConfigSchema(f"plugins.{NAME}", HelloSettings)

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> None:
        self.settings = broker.plugin_settings(NAME)

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(DESCRIBE_CLIENT_QUOTAS, self.describe_client_quotas,
                          min_version=0, max_version=1)

    def describe_client_quotas(self, ctx: RequestContext, request: Any) -> Any:
        self.requests_served += 1
        m = response_module(DESCRIBE_CLIENT_QUOTAS, ctx.api_version)
        entry = m.EntryData(
            entity=(m.EntityData(entity_type="user", entity_name=None),),
            values=(m.ValueData(key="producer_byte_rate",
                                value=self.settings.producer_byte_rate),),
        )
        return m.DescribeClientQuotasResponse(
            throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
            error_message=None, entries=(entry,),
        )


class ClashingPlugin:
    """Claims Metadata, which the kernel serves: startup must refuse it."""

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(3, lambda ctx, req: None, min_version=0, max_version=1)
