"""The few C library calls Python's os module does not offer (Linux; None elsewhere)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import sys
from collections.abc import Sequence
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


IOV_MAX = 1024  # Linux's limit on buffers per pwritev
FALLOC_FL_KEEP_SIZE = 0x01


def pwritev_all(fd: int, chunks: Sequence[bytes | bytearray | memoryview], position: int) -> None:
    """Write ``chunks`` back to back at ``position``, resuming after short writes."""
    views = [memoryview(c) for c in chunks]
    first = 0
    while first < len(views):
        written = os.pwritev(fd, views[first:first + IOV_MAX], position)
        position += written
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if written:
            views[first] = views[first][written:]


def fallocate_keep_size(fd: int, offset: int, length: int) -> bool:
    """Reserve disk blocks for ``length`` bytes from ``offset`` without changing the
    file size (fallocate(2) with FALLOC_FL_KEEP_SIZE, which os.posix_fallocate cannot
    pass). False where the platform or the filesystem cannot."""
    function = _fallocate()
    return function is not None and function(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0


@functools.cache
def _fallocate() -> Any | None:
    return libc_function(
        "fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    )
