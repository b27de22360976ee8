"""``kafkernel`` command line: serve, config check, plugins list, version, and the admin
commands of the admin package (topic, group, cluster, config describe|alter)."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import gc
import os
import re
import resource
import signal
import sys
import tomllib
from collections.abc import Sequence

import kernel
from kernel.config import BrokerConfig, ConfigError, ConfigProblem, load_config
from kernel.libc import libc_function
from kernel.plugins import PluginFacade, installed_plugin_keys, installed_plugins, load_plugin
from kernel.terminal import ProgressBar


def _run(coro_factory: object) -> None:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        asyncio.run(coro_factory())  # type: ignore[operator]
    else:
        uvloop.run(coro_factory())  # type: ignore[operator]


async def _serve(config: str | None, overrides: list[str],
                 raised_limit: tuple[int, int, int] | None) -> None:
    from kernel.server import Broker

    # On a terminal, a start-up's log recovery is a progress bar below the log lines.
    broker = Broker(load_config(config, overrides, plugin_keys=installed_plugin_keys),
                    progress_bar=ProgressBar.on_terminal(sys.stderr))
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(broker.report_loop_error)
    stopping: list[asyncio.Task[None]] = []

    def request_stop(signame: str) -> None:
        if not stopping:
            broker.log.info("shutting down", signal=signame)
            stopping.append(loop.create_task(broker.stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop, sig.name)
    await broker.start()  # a failed start has stopped what it started, quietly
    # What start-up made (modules, kio's schema classes, the loaded logs) lives as long
    # as the process: out of the collector's generations, a full collection walks only
    # what came after, and its pause (the GIL held 70-130 ms on a big heap, stalling the
    # loop) shrinks. Process-wide, so only the server binary does it.
    gc.freeze()
    if raised_limit is not None:
        broker.log.info("raised the open files limit (RLIMIT_NOFILE)", soft=raised_limit[1],
                        was=raised_limit[0], hard=raised_limit[2])
    await broker.wait_stopped()


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 64 * 1024 * 1024
HEAP_ALLOCATIONS_UP_TO = 32 * 1024 * 1024


def _keep_freed_memory() -> None:
    """Let glibc reuse freed request buffers instead of returning them to the kernel.

    Every produce request allocates a frame and its records (about 1 MB each with
    librdkafka's batch.size). With glibc's defaults these come from fresh mmaps or from
    a heap top that is trimmed as soon as they are freed, so each request page-faults
    its buffers in again: a third of the broker's CPU at 1 KB records. Serving
    allocations up to 32 MB from the heap and trimming only beyond 64 MB of free top
    keeps them warm. Only the server binary does this: it is process-wide.
    """
    mallopt = libc_function("mallopt", [ctypes.c_int, ctypes.c_int])
    if mallopt is None:
        return
    mallopt(M_MMAP_THRESHOLD, HEAP_ALLOCATIONS_UP_TO)
    mallopt(M_TRIM_THRESHOLD, KEEP_FREED_BYTES)


def _raise_open_files_limit() -> tuple[int, int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as Kafka's start scripts expect
    an operator to: the log's open segment files get half of what the broker's fixed
    needs leave, and a default soft limit of 1024 would keep few segments open (the
    least recently used ones close and reopen). Returns (old soft, new soft, hard)
    when it was raised. Only the server binary does this: it is process-wide."""
    from kernel.network.descriptors import NR_OPEN_DEFAULT

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NR_OPEN_DEFAULT if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return None
    return soft, target, hard


def cmd_serve(args: argparse.Namespace) -> int:
    # kio builds hypothesis strategies for its types whenever hypothesis is importable
    # (it is, where the test extra is installed): ~1.3 s and ~200 MB at startup that a
    # server never uses. Only the server binary opts out; tests keep hypothesis.
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    _keep_freed_memory()
    raised_limit = _raise_open_files_limit()
    _run(lambda: _serve(args.config, args.override, raised_limit))
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    from kernel.network.descriptors import describe_room, partitions_on_disk, serve_limit
    from kernel.server import Broker

    problems: list[ConfigProblem] = []
    try:
        loaded = load_config(args.file, args.override, plugin_keys=installed_plugin_keys)
    except ConfigError as e:
        # The broker's table is refused: the plugins' tables are still checked, so one
        # run reports every problem in the file.
        problems += e.problems
        problems += _plugin_table_problems(args.file)
    else:
        try:
            # Building the Broker loads the plugins and validates their tables and
            # routes, exactly as serve does, without binding sockets or touching data.
            broker = Broker(loaded)
        except ConfigError as e:
            problems += e.problems
    if problems:
        lines = key_lines(_text_of(args.file))
        for override in args.override:  # its value is not the file's: no line of it
            lines.pop(override.partition("=")[0].strip(), None)
        for problem in sorted(problems, key=lambda p: lines.get(p.key or "", sys.maxsize)):
            print(with_line(problem, args.file, lines), file=sys.stderr)
        return 2
    print(f"{args.file}: ok")
    # The room serve would leave clients: under the limit it raises to, with the
    # partitions log.dirs holds now.
    reserve = dataclasses.replace(broker.descriptor_reserve, limit=serve_limit())
    print(f"{args.file}: {describe_room(reserve, partitions_on_disk(broker.config.log_dirs), 0)}")
    return 0


def _text_of(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _plugin_table_problems(path: str) -> list[ConfigProblem]:
    """The enabled plugins' tables checked by their schemas, for a file whose broker
    table was refused (Broker, which checks them otherwise, was not built)."""
    try:
        with open(path, "rb") as f:
            plugins = tomllib.load(f).get("plugins")
        if not isinstance(plugins, dict):
            return []
        tables = {k: v for k, v in plugins.items() if isinstance(v, dict)}
        loaded = load_config(None, extra={"plugins.enabled": plugins.get("enabled", [])},
                             plugin_tables=tables)
    except (OSError, tomllib.TOMLDecodeError, ConfigError):
        return []  # what load_config said of the file covers it
    problems: list[ConfigProblem] = []
    try:
        schemas = PluginFacade(loaded.enabled_plugins, path, []).config_schemas()
    except ConfigError as e:  # a plugin that can't be found or loaded
        return list(e.problems)
    for name in loaded.enabled_plugins:
        if name in schemas:
            try:
                schemas[name].build(loaded.plugin_tables.get(name, {}), path)
            except ConfigError as e:
                problems += e.problems
    return problems


_TOML_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_TOML_KEY = rf"{_TOML_KEY_PART}(?:\s*\.\s*{_TOML_KEY_PART})*"
_TOML_TABLE_LINE = re.compile(rf"\[\[?\s*({_TOML_KEY})\s*\]\]?")
_TOML_KEY_LINE = re.compile(rf"({_TOML_KEY})\s*=")
_TOML_ERROR_LINE = re.compile(r"\(at line (\d+)")


def _dotted(key: str) -> str:
    return ".".join(p.strip().strip("\"'") for p in re.findall(_TOML_KEY_PART, key))


def key_lines(text: str) -> dict[str, int]:
    """The line each key of a TOML text is on, by its dotted name as config errors name
    it (``num.partitions``, ``plugins.auth_sasl.sasl.enabled.mechanisms``): tomllib
    keeps no positions, so the text is scanned for table headers and ``key =`` lines."""
    lines: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = _TOML_TABLE_LINE.match(stripped)
        if header:
            table = _dotted(header.group(1))
            continue
        assignment = _TOML_KEY_LINE.match(stripped)
        if assignment:
            name = _dotted(assignment.group(1))
            lines.setdefault(f"{table}.{name}" if table else name, number)
    return lines


def with_line(problem: ConfigProblem, path: str, lines: dict[str, int]) -> str:
    """``FILE:LINE: KEY: problem`` where the line is known, as compilers write it."""
    text = str(problem)
    line = lines.get(problem.key) if problem.key is not None else None
    if line is None:
        found = _TOML_ERROR_LINE.search(text)
        line = int(found.group(1)) if found else None
    if line is None or not text.startswith(f"{path}: "):
        return text
    return f"{path}:{line}: {text[len(path) + 2:]}"


def cmd_plugins_list(args: argparse.Namespace) -> int:
    enabled: tuple[str, ...] = ()
    if args.config:
        enabled = load_config(args.config, args.override).enabled_plugins
    installed = installed_plugins()
    for name, plugin in installed.items():
        mark = "enabled" if name in enabled else "-"
        print(f"{name:<20} {mark:<8} {plugin.value}  ({plugin.distribution or 'local'})")
    for name in enabled:
        if name not in installed:
            print(f"{name:<20} {'enabled':<8} (module path)")
    return 0


def cmd_spark_export(argv: Sequence[str]) -> int:
    # The spark package (pyspark, rich) is optional: imported only for this command,
    # which parses its own options (spark/options.py, shared with the spark_sink plugin).
    from spark.cli import main as export_main

    return export_main(argv)


def _load_broker_config(path: str | None, overrides: list[str]) -> BrokerConfig:
    return load_config(path, overrides, plugin_keys=installed_plugin_keys).broker


def _add_plugin_commands(sub: object) -> None:
    """The installed plugins' own commands (``kafkernel_commands``): ``storage``."""
    for name in installed_plugins():
        try:
            hook = getattr(load_plugin(name, ""), "kafkernel_commands", None)
        except Exception:  # a plugin that fails to load adds no command
            continue
        if hook is not None:
            hook(subparsers=sub, load_config=_load_broker_config)


def _command_names(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions  # argparse keeps its subparsers there
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}


def build_parser(plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The command line; ``plugin_commands`` False leaves out the installed plugins'
    (importing every plugin costs seconds that ``serve`` or ``version`` need not pay)."""
    parser = argparse.ArgumentParser(prog="kafkernel", description=kernel.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a broker")
    serve.add_argument("--config", "-c", help="TOML config file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a setting (repeatable), e.g. broker.id=2")
    serve.set_defaults(func=cmd_serve)

    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a config file as serve would")
    check.add_argument("file")
    check.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    check.set_defaults(func=cmd_config_check)

    # topic, group, cluster and broker configs: clients of any Kafka-compatible broker
    from admin.cli import add_parsers as add_admin_parsers

    add_admin_parsers(sub, config_sub)

    plugins = sub.add_parser("plugins", help="plugin tools")
    plugins_sub = plugins.add_subparsers(dest="plugins_command", required=True)
    plist = plugins_sub.add_parser("list", help="installed plugins and which are enabled")
    plist.add_argument("--config", "-c")
    plist.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    plist.set_defaults(func=cmd_plugins_list)

    if plugin_commands:
        _add_plugin_commands(sub)

    spark = sub.add_parser("spark", help="Spark tools (the spark extra)")
    spark_sub = spark.add_subparsers(dest="spark_command", required=True)
    export = spark_sub.add_parser(
        "export", add_help=False,
        help="run one export of topics to a Parquet table, with a progress bar "
             "(--help for its options)")
    export.set_defaults(func=lambda _a: cmd_spark_export([]))

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _a: print(kernel.__version__) or 0)
    return parser


# How a shell reports a command killed by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status. Output into a closed pipe (``... | head -1``) ends it
    quietly, as SIGPIPE ends other CLIs: Python ignores the signal and raises instead."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe prints a traceback
    except BrokenPipeError:
        # Nothing more can reach the reader: stdout goes to devnull so the interpreter's
        # own flush at exit finds nothing to complain about.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["spark", "export"]:
        return cmd_spark_export(argv[2:])
    kernel_parser = build_parser(plugin_commands=False)
    own = argv[:1] and argv[0] in _command_names(kernel_parser)
    args = (kernel_parser if own else build_parser()).parse_args(argv)
    # Plugins named by import path are also looked for in the current directory, as
    # gunicorn and uvicorn find an application; last, so it shadows nothing installed.
    # Only the command line does this: sys.path is process-wide.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return int(args.func(args))
    except ConfigError as e:  # StartupError too: FILE: KEY: problem, one line
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
