"""Stream proxies: the app iterates the SDK's stream through them, the span ends exactly once.

A provider wraps the stream a call returns in :class:`SyncStreamProxy` / :class:`AsyncStreamProxy` (SDK
streams) or :class:`SyncGeneratorProxy` / :class:`AsyncGeneratorProxy` (plain generators) with a
:class:`StreamAccumulator` of its own; the proxy ends the call's span on exhaustion, error, ``close()``,
``with`` exit or garbage collection, whichever comes first.

A stream the app stops reading before its end (``close()``, leaving ``with`` or dropping it, with no
error) and whose last event never came (no finish reason) was *abandoned*: the span gets
``tallyspan.stream.abandoned=true`` and the checks judge no text of it, since the consumer, not the
model, cut the answer short.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Protocol

from tallyspan import semconv
from tallyspan.plugin import swallowed
from tallyspan_instrumentors._calls import Extraction, GenAICall
from tallyspan_instrumentors._wrapt import ObjectProxy

__all__ = [
    "AsyncGeneratorProxy",
    "AsyncStreamProxy",
    "StreamAccumulator",
    "SyncGeneratorProxy",
    "SyncStreamProxy",
    "finalize_if_proxy",
]

_logger = logging.getLogger(__name__)

#: How an iterator says it has no more items: the stream ended, it did not fail.
_END_OF_ITEMS = (StopIteration, StopAsyncIteration)


class StreamAccumulator(Protocol):
    """Collects a stream's items; a provider module implements one per stream kind."""

    def add(self, item: Any) -> None:
        """Take one chunk or event."""

    def extraction(self, call: GenAICall) -> Extraction:
        """What the items so far say, for the span (also called for streams cut short)."""


class _StreamState:
    """One stream's bookkeeping: the stream, its call and accumulator, whether the span has ended.

    Kept apart from the proxy, in a plain object with slots: every attribute read on a subclass of
    wrapt's ObjectProxy goes through a generic call of its ``__getattribute__`` (over a thousand
    instructions); the proxy reads this object once a chunk, its fields are then read directly.
    """

    __slots__ = ("accumulator", "call", "exhausted", "finalized", "first_item_at", "stream")

    def __init__(self, stream: Any, call: GenAICall, accumulator: StreamAccumulator) -> None:
        self.stream = stream
        self.call = call
        self.accumulator: StreamAccumulator | None = accumulator
        self.finalized = False
        self.exhausted = False
        self.first_item_at: float | None = None

    def observe(self, item: Any) -> None:
        accumulator = self.accumulator
        if accumulator is None:  # the span has ended: later items are the app's alone
            return
        try:
            if self.first_item_at is None:
                self.first_item_at = time.monotonic()
            accumulator.add(item)
        except Exception:  # a chunk we cannot read still reaches the app
            swallowed(_logger, "stream.chunk", "tallyspan could not read a stream chunk")

    def read_raised(self, exc: BaseException) -> None:
        """A read of the stream raised: the end of the items, or an error; either ends the span (the
        caller lets the exception go on)."""
        if isinstance(exc, _END_OF_ITEMS):
            self.exhausted = True
            self.finalize()
        else:
            self.finalize(exc)

    def finalize(self, error: BaseException | None = None) -> None:
        if self.finalized:
            return
        self.finalized = True
        call = self.call
        accumulator, self.accumulator = self.accumulator, None
        # Dropped here, not with the proxy: an app keeping its stream object must not keep every chunk.
        try:
            extraction = accumulator.extraction(call) if accumulator is not None else None
            if extraction is not None and self.first_item_at is not None:
                extraction.attributes[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = (
                    self.first_item_at - call.started_at
                )
            if (
                error is None
                and not self.exhausted
                and extraction is not None
                and semconv.GEN_AI_RESPONSE_FINISH_REASONS not in extraction.attributes
            ):
                extraction.attributes[semconv.STREAM_ABANDONED] = True
        except Exception:  # a stream we cannot summarise still ends its span
            swallowed(_logger, "stream.finish", "tallyspan could not summarise a stream")
            extraction = None
        if error is not None:
            call.fail(error, extraction.attributes if extraction is not None else None)
        else:
            call.finish(extraction)


class _StreamProxy(ObjectProxy):
    """What the sync and async proxies share: their :class:`_StreamState` (``_self_state``: wrapt keeps a
    proxy's own attributes under the ``_self_`` prefix) ends the span once, and so does collection."""

    def __init__(self, stream: Any, call: GenAICall, accumulator: StreamAccumulator) -> None:
        super().__init__(stream)
        self._self_state = _StreamState(stream, call, accumulator)

    def _tallyspan_finalize(self, error: BaseException | None = None) -> None:
        self._self_state.finalize(error)

    def __del__(self) -> None:
        # Abandoned streams (dropped unread) are finalized when collected, so no span is left open.
        try:
            state = getattr(self, "_self_state", None)  # None: a half-built proxy has nothing to end
            if state is not None:
                state.finalize()  # once: a stream that ended before does nothing here
        except Exception:  # nothing may escape __del__
            swallowed(_logger, "stream.collect", "tallyspan could not end an abandoned stream's span")


def _exit_error(exc: Any) -> BaseException | None:
    """The exception that ends a ``with`` block early: the stream was cut short, the call failed."""
    return exc if isinstance(exc, BaseException) else None


class _SyncIterationProxy(_StreamProxy):
    """Iteration through the proxy: each item is observed, the end of the items ends the span."""

    def __iter__(self) -> _SyncIterationProxy:
        return self

    def __next__(self) -> Any:
        # A plain try, not a context manager, and one read of the proxy: this runs for every chunk.
        state = self._self_state
        try:
            item = next(state.stream)
        except BaseException as exc:
            state.read_raised(exc)
            raise
        state.observe(item)
        return item


class SyncStreamProxy(_SyncIterationProxy):
    """Wraps an SDK stream: the app sees the same object, the span ends exactly once."""

    def __enter__(self) -> SyncStreamProxy:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, traceback)
        finally:
            self._tallyspan_finalize(_exit_error(exc))

    def close(self) -> None:
        """Close the underlying stream and end the span."""
        try:
            self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


def _no_context_manager(wrapped: object, method: str, protocol: str) -> Exception:
    """What ``with`` (or ``async with``) raises on ``wrapped``, an object without ``method``, on this Python:
    from 3.11 a TypeError that names the protocol, before it the AttributeError of the method's lookup."""
    if sys.version_info < (3, 11):
        return AttributeError(method)
    return TypeError(f"'{type(wrapped).__name__}' object does not support the {protocol} protocol")


class SyncGeneratorProxy(_SyncIterationProxy):
    """Wraps a generator of items (ollama's streams): ``close()`` ends the span too.

    A generator is no context manager: ``with`` fails with the error it gives the bare generator on this
    Python (wrapt's proxy would forward ``__enter__`` and fail with its own AttributeError instead).
    """

    def __enter__(self) -> Any:
        raise _no_context_manager(self.__wrapped__, "__enter__", "context manager")

    def close(self) -> None:
        """Close the generator and end the span."""
        try:
            self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


class _AsyncIterationProxy(_StreamProxy):
    """The async twin of :class:`_SyncIterationProxy`."""

    def __aiter__(self) -> _AsyncIterationProxy:
        return self

    async def __anext__(self) -> Any:
        state = self._self_state
        try:
            item = await state.stream.__anext__()
        except BaseException as exc:
            state.read_raised(exc)
            raise
        state.observe(item)
        return item


class AsyncStreamProxy(_AsyncIterationProxy):
    """The async twin of :class:`SyncStreamProxy`."""

    async def __aenter__(self) -> AsyncStreamProxy:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, traceback)
        finally:
            self._tallyspan_finalize(_exit_error(exc))

    async def close(self) -> None:
        """Close the underlying stream and end the span."""
        try:
            await self.__wrapped__.close()
        finally:
            self._tallyspan_finalize()


class AsyncGeneratorProxy(_AsyncIterationProxy):
    """Wraps an async generator of items: ``aclose()`` ends the span too; like it, no context manager."""

    async def __aenter__(self) -> Any:
        raise _no_context_manager(self.__wrapped__, "__aenter__", "asynchronous context manager")

    async def aclose(self) -> None:
        """Close the generator and end the span."""
        try:
            await self.__wrapped__.aclose()
        finally:
            self._tallyspan_finalize()


def finalize_if_proxy(stream: Any, error: BaseException | None = None) -> None:
    """End the span of ``stream`` if it is one of our proxies (SDK helpers close streams behind them).

    With ``error`` (an exception that left a ``with`` block early), the span is marked failed by it.
    """
    if isinstance(stream, _StreamProxy):
        stream._tallyspan_finalize(error)
