"""What a command prints: tables for people (rich), JSON for programs. A command builds
one :class:`View` (its JSON document and the tables that show it) and prints it once."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class Table:
    title: str | None
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


@dataclass
class View:
    document: Any
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # written after the tables, as is


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value)
    return str(value)


def emit(view: View, output: str, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    if output == "json":
        json.dump(view.document, stream, indent=2, sort_keys=True)
        stream.write("\n")
        return
    from rich.console import Console
    from rich.table import Table as RichTable

    # off a terminal (a pipe, a file) rich would fold tables at 80 columns
    console = Console(file=stream, width=None if stream.isatty() else 200)
    for table in view.tables:
        rich_table = RichTable(title=table.title, title_justify="left")
        for column in table.columns:
            rich_table.add_column(column, overflow="fold")
        for row in table.rows:
            rich_table.add_row(*(cell(v) for v in row))
        console.print(rich_table)
    for line in view.lines:  # as they are: a consumed record's text is the user's
        stream.write(line + "\n")
