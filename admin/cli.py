"""The admin commands' place in ``kafkernel``'s command line, and how one runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from admin import cluster, groups, quotas, records, security, topics
from admin.client import add_client_arguments, admin_client, client_options
from admin.errors import AdminError
from admin.output import emit


def add_parsers(sub: Any, config_commands: Any) -> None:
    """``topic``, ``group``, ``cluster``, broker ``config describe|alter``, ``produce``,
    ``consume``, ``user``, ``acl`` and ``quota``."""
    common = argparse.ArgumentParser(add_help=False)
    add_client_arguments(common)
    common.set_defaults(func=run)
    topics.add_parsers(sub, common)
    groups.add_parsers(sub, common)
    cluster.add_parsers(sub, common, config_commands)
    records.add_parsers(sub, common)
    security.add_parsers(sub, common)
    quotas.add_parsers(sub, common)


def run(args: argparse.Namespace) -> int:
    """Run the chosen command: 0, or 1 with one line on stderr."""
    try:
        import confluent_kafka  # noqa: F401
        import rich  # noqa: F401
    except ImportError as e:
        print(f"kafkernel: the admin commands need the admin extra "
              f"(pip install 'kafkernel[admin]'): {e}", file=sys.stderr)
        return 2
    try:
        options = client_options(args)
        view = args.admin(args, options, admin_client(options))
    except AdminError as e:
        print(f"kafkernel: {e}", file=sys.stderr)
        return 1
    emit(view, args.output)
    return 0
