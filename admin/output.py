"""What a command prints: tables for people (rich on a terminal, plain columns off one),
JSON for programs. A command builds one :class:`View` (its JSON document and the tables
that show it) and prints it once."""

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
    if stream.isatty():
        _rich_tables(view.tables, stream)
    else:
        # Off a terminal (a pipe, a file) rich folds long cells over several lines and
        # draws boxes: plain columns instead, a row a line, for grep, awk and cut.
        for i, table in enumerate(view.tables):
            if i:
                stream.write("\n")
            _plain_table(table, stream)
    for line in view.lines:  # as they are: a consumed record's text is the user's
        stream.write(line + "\n")


def _rich_tables(tables: list[Table], stream: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=stream)
    for table in tables:
        rich_table = RichTable(title=table.title, title_justify="left")
        for column in table.columns:
            rich_table.add_column(column, overflow="fold")
        for row in table.rows:
            rich_table.add_row(*(cell(v) for v in row))
        console.print(rich_table)


def _plain_table(table: Table, stream: TextIO) -> None:
    """The title, then the header and rows, columns two spaces apart; the last column
    is not padded."""
    rows = [table.columns, *([cell(v) for v in row] for row in table.rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.columns))]
    if table.title:
        stream.write(table.title + "\n")
    for row in rows:
        stream.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                     .rstrip() + "\n")
