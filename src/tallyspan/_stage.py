"""``tallyspan.stage(name)``: the kind of work whose contract applies to the model calls inside it."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = ["StageInfo", "current_stage", "stage"]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class StageInfo:
    """The stage in force: its name and when its work was queued (epoch seconds), if known."""

    name: str
    enqueued_at: float | None = None


_current: contextvars.ContextVar[StageInfo | None] = contextvars.ContextVar("tallyspan_stage", default=None)


def current_stage() -> StageInfo | None:
    """Return the innermost stage in force in this context, or None."""
    return _current.get()


class stage:  # noqa: N801 - used like a function: ``with tallyspan.stage("report"):``
    """Stamp ``tallyspan.stage`` on every model span started inside; a context manager or decorator.

    Args:
        name: the stage, i.e. the key of its contract in the contracts file.
        enqueued_at: epoch seconds at which this work was queued, for the scheduler_starvation check.

    Example::

        with tallyspan.stage("weekly_report"):
            client.chat.completions.create(...)

        @tallyspan.stage("triage")
        def triage(ticket): ...
    """

    def __init__(self, name: str, *, enqueued_at: float | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError("stage name must be a non-empty string")
        self._info = StageInfo(name, enqueued_at)
        self._tokens: list[contextvars.Token[StageInfo | None]] = []

    def __enter__(self) -> StageInfo:
        self._tokens.append(_current.set(self._info))
        return self._info

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._tokens.pop())

    def __call__(self, func: _F) -> _F:
        info = self._info
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with _scoped(info):
                    return await func(*args, **kwargs)

            return cast(_F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _scoped(info):
                return func(*args, **kwargs)

        return cast(_F, wrapper)


@contextmanager
def _scoped(info: StageInfo) -> Iterator[None]:
    token = _current.set(info)
    try:
        yield
    finally:
        _current.reset(token)
