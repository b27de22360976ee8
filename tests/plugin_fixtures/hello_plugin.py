"""A complete small plugin: it serves DescribeDelegationToken (API key 41), which the
kernel does not, answering with one example token whose lifetime comes from its own
TOML table.

Enable it with
    [plugins]
    enabled = ["metadata_kraft", "coordinator", "txn",
               "tests.plugin_fixtures.hello_plugin:HelloPlugin"]
    [plugins."tests.plugin_fixtures.hello_plugin:HelloPlugin"]
    token_lifetime_ms = 86400000
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kernel.api.config import ConfigSchema, at_least, setting
from kernel.api.handlers import ApiRegistry, RequestContext
from kernel.api.hooks import hookimpl
from kernel.api.protocol import make, response_module

NAME = "tests.plugin_fixtures.hello_plugin:HelloPlugin"
DESCRIBE_DELEGATION_TOKEN = 41


@dataclass(frozen=True, slots=True)
class HelloSettings:
    token_lifetime_ms: int = setting(
        "token_lifetime_ms", 86400000, "Lifetime of the example token.", check=at_least(0),
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
    def kafkernel_configure(self, settings: HelloSettings) -> None:
        self.settings = settings  # the table it was enabled under, validated

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(DESCRIBE_DELEGATION_TOKEN, self.describe_delegation_token,
                          min_version=1, max_version=3)

    def describe_delegation_token(self, ctx: RequestContext, request: Any) -> Any:
        self.requests_served += 1
        m = response_module(DESCRIBE_DELEGATION_TOKEN, ctx.api_version)
        now = int(time.time() * 1000)
        # make() fills the fields one version has and another lacks (the requester, v3).
        token = make(
            m.DescribedDelegationToken, principal_type="User", principal_name="hello",
            token_requester_principal_type="User", token_requester_principal_name="hello",
            issue_timestamp=now, expiry_timestamp=now + self.settings.token_lifetime_ms,
            max_timestamp=now + self.settings.token_lifetime_ms, token_id="hello-token",
            hmac=b"", renewers=(),
        )
        return m.DescribeDelegationTokenResponse(
            error_code=ErrorCode.none, tokens=(token,), throttle_time=datetime.timedelta(0),
        )


class ClashingPlugin:
    """Claims Metadata, which the kernel serves: startup must refuse it."""

    @hookimpl
    def kafkernel_register_apis(self, registry: ApiRegistry) -> None:
        registry.register(3, lambda ctx, req: None, min_version=0, max_version=1)
