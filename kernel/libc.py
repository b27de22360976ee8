"""The few C library calls Python's os module does not offer (Linux; None elsewhere)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import sys
from typing import Any


def libc_function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int) -> Any | None:
    """``name`` from the C library with its signature set, or None when the platform
    or its libc (e.g. musl for ``mallopt``) does not have it."""
    if not sys.platform.startswith("linux"):
        return None
    path = ctypes.util.find_library("c")
    if path is None:
        return None
    function = getattr(ctypes.CDLL(path, use_errno=True), name, None)
    if function is None:
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


def out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` is the process (EMFILE) or the system (ENFILE) out of file
    descriptors: a condition that passes, so the work is retried rather than failed."""
    return isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE)
