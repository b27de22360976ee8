"""Config changes as the admin commands take them (``--set KEY=VALUE``, ``--delete KEY``)
and send them (IncrementalAlterConfigs), for topics and brokers alike."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from admin.client import ClientOptions, result
from admin.errors import AdminError


def key_values(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AdminError(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def alter(args: argparse.Namespace, options: ClientOptions, client: Any,
          resource: Callable[[list[Any]], Any], what: str) -> dict[str, str]:
    """Send ``--set`` and ``--delete`` to the resource ``resource(entries)`` makes;
    returns what was set."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    sets = key_values(args.set, "--set")
    if not sets and not args.delete:
        raise AdminError("nothing to change: give --set KEY=VALUE or --delete KEY")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in args.delete]
    target = resource(entries)
    futures = client.incremental_alter_configs([target], request_timeout=options.timeout_s)
    result(futures[target], options, what)
    return sets
