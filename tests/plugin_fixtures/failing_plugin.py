"""A plugin that refuses to start once the coordinator has started (its offsets topic
loading, its timers): the broker must stop all of it without logging more."""

from __future__ import annotations

from typing import Any

from kernel.api.config import StartupError
from kernel.api.hooks import hookimpl

NAME = "tests.plugin_fixtures.failing_plugin:RefusesToStart"


class RefusesToStart:
    @hookimpl
    def kafkernel_startup(self, broker: Any) -> Any:
        async def refuse() -> None:
            # at once: the coordinator's partition loads are scheduled, not yet run
            raise StartupError(f"{broker.loaded.source}: plugins.enabled: {NAME} refuses "
                               "to start")

        return refuse()


CRASHES = "tests.plugin_fixtures.failing_plugin:CrashesAtStart"
CRASHES_LATER = "tests.plugin_fixtures.failing_plugin:CrashesWhileStarting"


class CrashesAtStart:
    """A plugin with a bug: its start-up hook raises something no one planned for."""

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> Any:
        return {}["missing setting"]


class CrashesWhileStarting:
    """The same bug in the awaitable a start-up hook returns."""

    @hookimpl
    def kafkernel_startup(self, broker: Any) -> Any:
        async def start() -> None:
            raise OSError(98, "Address already in use")

        return start()
