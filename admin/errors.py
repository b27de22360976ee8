"""The one error an admin command ends with: a line on stderr, exit code 1."""

from __future__ import annotations


class AdminError(Exception):
    """What went wrong, in one line: a broker's error or a broker out of reach."""
