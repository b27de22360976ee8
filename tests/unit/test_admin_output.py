"""What admin commands print off a terminal: plain columns a pipe or a file can use
(grep, awk, cut), each row on one line however long its cells."""

from __future__ import annotations

import io

from admin.output import Table, View, emit

LONG = "PLAINTEXT://broker-0.kafka.example.com:9092," * 8


def test_tables_off_a_terminal_are_plain_columns() -> None:
    out = io.StringIO()  # not a terminal
    emit(View({}, [Table("Broker 1 configs", ["NAME", "VALUE", "SOURCE"],
                         [["listeners", LONG, "STATIC_BROKER_CONFIG"],
                          ["num.partitions", 3, "DEFAULT_CONFIG"],
                          ["log.dirs", None, "DEFAULT_CONFIG"]]),
                   Table(None, ["TOPIC", "PARTITIONS"], [["orders", 3]])],
                lines=["2 tables"]), "table", out)
    width = len(LONG)
    assert out.getvalue().splitlines() == [
        "Broker 1 configs",
        f"NAME            {'VALUE':<{width}}  SOURCE",
        f"listeners       {LONG}  STATIC_BROKER_CONFIG",
        f"num.partitions  {'3':<{width}}  DEFAULT_CONFIG",
        f"log.dirs        {'-':<{width}}  DEFAULT_CONFIG",
        "",
        "TOPIC   PARTITIONS",
        "orders  3",
        "2 tables",
    ]
