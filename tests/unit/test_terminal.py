"""The terminal's progress bar: drawn below the log lines, erased before each line and
drawn again after it, gone for good when its task finished; only on a terminal."""

from __future__ import annotations

import io
import os
import pty
from dataclasses import dataclass

import pytest

from kernel.terminal import ProgressBar, render

ERASE = "\r\x1b[K"


@dataclass
class Task:
    fraction: float
    finished: bool = False
    label: str = "working"

    def describe(self) -> str:
        return f"{self.fraction:.2f} done"


def screen(output: str) -> list[str]:
    """The lines a terminal shows for ``output``: an erase clears the current line."""
    lines, current = [], ""
    for piece in output.replace(ERASE, "\x00").split("\n"):
        *_, current = ("\x00" + piece).split("\x00")
        lines.append(current)
    return lines


def test_the_bar_stays_below_the_log_lines() -> None:
    out = io.StringIO()
    bar = ProgressBar(out)
    print("first line", file=bar, flush=True)
    bar.update(Task(0.25))
    assert out.getvalue() == (
        f"first line\n{ERASE}working [######------------------]  25%  0.25 done")
    print("second line", file=bar, flush=True)  # print writes the line, then "\n"
    bar.update(Task(0.5))
    assert screen(out.getvalue()) == [
        "first line", "second line",
        "working [############------------]  50%  0.50 done"]
    assert "second line" + ERASE not in out.getvalue()  # no redraw mid-line
    bar.update(Task(1.0, finished=True))
    print("third line", file=bar, flush=True)
    assert screen(out.getvalue()) == ["first line", "second line", "third line", ""]
    bar.update(Task(0.5, finished=True))  # nothing left to erase
    assert out.getvalue().endswith("third line\n")


def test_a_partial_line_is_not_drawn_over() -> None:
    out = io.StringIO()
    bar = ProgressBar(out)
    bar.write("half a line")
    bar.update(Task(0.1))  # waits for the line to end
    assert out.getvalue() == "half a line"
    bar.write(", the rest\n")
    assert screen(out.getvalue()) == ["half a line, the rest",
                                      "working [##----------------------]  10%  0.10 done"]


class GoneTerminal(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")


def test_a_terminal_that_went_away_ends_the_bar_not_the_task() -> None:
    bar = ProgressBar(GoneTerminal())
    bar.update(Task(0.5))
    bar.update(Task(0.6))
    bar.update(Task(1.0, finished=True))
    with pytest.raises(OSError):  # a log line's failure is the logger's, as without a bar
        bar.write("line\n")


def test_render_fits_the_terminal() -> None:
    assert render(Task(0.0), 200) == "working [------------------------]   0%  0.00 done"
    assert render(Task(1.7), 200).startswith("working [" + "#" * 24 + "] 100%")
    assert render(Task(0.5), 20) == "working [##########"
    assert len(render(Task(0.5), 40)) == 39


def test_only_a_terminal_gets_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ProgressBar.on_terminal(io.StringIO()) is None
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            monkeypatch.setenv("TERM", "xterm")
            assert isinstance(ProgressBar.on_terminal(tty), ProgressBar)
            monkeypatch.setenv("TERM", "dumb")
            assert ProgressBar.on_terminal(tty) is None
    finally:
        os.close(master)
        os.close(slave)
