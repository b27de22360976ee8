"""A progress bar for a person at a terminal, below the log lines.

``kafkernel serve`` on a terminal shows a start-up's log recovery as a bar on stderr, the
stream its log lines go to: the bar is the last line, redrawn in place (carriage return,
erase to the end of the line), and the log lines are written through it, so one never
lands on the bar: the bar is erased, the line written, the bar drawn again below it. Off
a terminal nothing of this is used and stderr gets the log lines alone.

Drawn here rather than with rich (in the spark and admin extras only, for their bar
and tables): one line of text does not justify a dependency of every broker install.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Protocol, TextIO

# Carriage return, then erase from the cursor to the end of the line (ANSI EL).
_ERASE_LINE = "\r\x1b[K"
_DEFAULT_COLUMNS = 80
_BAR_CELLS = 24


class Progress(Protocol):
    """What the bar shows of a task: its name, how far it is, a line of figures."""

    @property
    def label(self) -> str: ...

    @property
    def fraction(self) -> float: ...

    @property
    def finished(self) -> bool: ...

    def describe(self) -> str: ...


class ProgressBar(io.TextIOBase):
    """A text stream for log lines (write, flush) that keeps a bar below them.

    :meth:`update` draws the bar for a task's progress, or erases it for good once the
    task is ``finished``. Thread-safe: the bar may be updated from a worker thread
    while the event loop logs."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self._lock = threading.Lock()
        self._bar: str | None = None  # the line to show, None when there is none
        self._drawn = False  # the bar is on the stream's last line now
        self._at_line_start = True  # nothing but the bar is on the last line
        self._broken = False  # drawing failed once: the bar is given up

    @classmethod
    def on_terminal(cls, stream: TextIO) -> ProgressBar | None:
        """A bar over ``stream`` if it is a terminal that takes cursor movement, else
        None: a file or a pipe gets the log lines alone."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            return None
        return cls(stream) if tty and os.environ.get("TERM") != "dumb" else None

    # -- the bar --------------------------------------------------------------------

    def update(self, progress: Progress) -> None:
        """Called from inside the task (recovery): a terminal that went away ends the
        bar, never the task."""
        with self._lock:
            if self._broken:
                return
            try:
                if progress.finished:
                    self._bar = None
                    self._erase()
                else:
                    self._bar = render(progress, self._columns())
                    if self._at_line_start:
                        self._draw()
                self._stream.flush()
            except (OSError, ValueError):
                self._bar, self._drawn, self._broken = None, False, True

    def _columns(self) -> int:
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            return _DEFAULT_COLUMNS
        return columns or _DEFAULT_COLUMNS  # a terminal whose size was never set: 0

    def _draw(self) -> None:
        if self._bar is not None:
            self._stream.write(_ERASE_LINE + self._bar)
            self._drawn = True

    def _erase(self) -> None:
        if self._drawn:
            self._stream.write(_ERASE_LINE)
            self._drawn = False

    # -- the log lines --------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not text:
            return 0
        with self._lock:
            self._erase()
            self._stream.write(text)
            self._at_line_start = text.endswith("\n")
            if self._at_line_start:
                self._draw()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._stream.flush()


def render(progress: Progress, columns: int) -> str:
    """``label [#######-----------]  38%  figures``, cut to fit in ``columns`` - 1 (a
    line as wide as the terminal wraps on some)."""
    fraction = min(1.0, max(0.0, progress.fraction))
    filled = int(fraction * _BAR_CELLS)
    bar = "#" * filled + "-" * (_BAR_CELLS - filled)
    line = f"{progress.label} [{bar}] {fraction:4.0%}  {progress.describe()}"
    return line[: max(1, columns - 1)]
