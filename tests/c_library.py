"""A stand-in for the process's C library, for the tests of giving memory back (the ``c_library`` fixture)."""

from __future__ import annotations

from typing import Any


class CLibrary:
    """A stand-in for the process's C library (``ctypes.CDLL(None)``): its ``malloc_trim`` records the
    arguments it is called with and raises ``error`` if given one; ``None`` for a C library without it."""

    def __init__(self, *, has_malloc_trim: bool = True, error: BaseException | None = None) -> None:
        self.calls: list[tuple[object, ...]] = []
        self._has_malloc_trim = has_malloc_trim
        self._error = error

    def __call__(self, name: object) -> CLibrary:  # ctypes.CDLL(None): the process's own symbols
        return self

    def __getattr__(self, name: str) -> Any:
        if name != "malloc_trim" or not self._has_malloc_trim:
            raise AttributeError(name)
        return self._malloc_trim

    def _malloc_trim(self, *args: object) -> int:
        self.calls.append(args)
        if self._error is not None:
            raise self._error
        return 1
