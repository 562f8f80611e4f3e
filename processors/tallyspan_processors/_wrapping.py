"""The wrapping-processor chain: a processor computes extra data for an ended span and forwards an
enriched copy, with the span's content, to the processors it wraps.

``instrument()`` builds ``OffThreadProcessor(ChecksProcessor(LedgerProcessor(exporters...)))``; each
link only knows the tuple of processors below it. The content of a span (``_content.take_content``) is
taken once, by the first link that receives the span from outside the chain (:meth:`on_end`), and
handed down with it (:meth:`receive`): no link below pops, peeks or parses it again.

On the chain's worker the spans go down in batches (:meth:`WrappingProcessor.receive_batch`,
:func:`forward_batch`): each link takes a whole batch before the next link sees it, so each link's code
and data stay in the CPU's caches for the batch, where span by span every link evicted the others' (the
worker's CPU per span fell about 8 %).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tallyspan.plugin import Content, content_buffer, swallowed
from tallyspan_processors._content import take_content

__all__ = [
    "Handed",
    "StartHook",
    "WrappingProcessor",
    "flush_all",
    "flush_in_turn",
    "forward",
    "forward_batch",
    "hand",
    "shutdown_all",
]

#: A span as the chain hands it down: with the content the first link took (None: none known).
Handed = tuple[ReadableSpan, "Content | None"]


class StartHook(Protocol):
    """What the chain runs when a span starts, on the app's thread: a processor's ``on_start``."""

    def __call__(self, span: Span, parent_context: Context | None = None) -> None: ...


_logger = logging.getLogger(__name__)

F = TypeVar("F")


def flush_all(processors: Sequence[SpanProcessor], timeout_millis: int) -> bool:
    """Flush each processor in turn within one shared deadline; True if all flushed in time."""
    return flush_in_turn(
        processors,
        time.monotonic() + timeout_millis / 1000,
        lambda processor, remaining_millis: processor.force_flush(remaining_millis),
        lambda processor: swallowed(_logger, "flush", "a span processor failed to flush"),
    )


def flush_in_turn(
    flushables: Iterable[F],
    deadline: float,
    flush: Callable[[F, int], object],
    failed: Callable[[F], None],
) -> bool:
    """``flush`` each of ``flushables`` with what is left of one ``deadline`` (``time.monotonic()``); True if
    all flushed in time. One that raises is handed to ``failed`` (to log and count) and the others still
    flush: each given the whole timeout, exit would wait for every hung backend in turn."""
    flushed = True
    for flushable in flushables:
        remaining_millis = int((deadline - time.monotonic()) * 1000)
        if remaining_millis <= 0:
            return False
        try:
            # Only False is a failure: on SDK releases before 1.40 a processor that does not override
            # force_flush answers None (the base class's returns nothing), having nothing to flush.
            flushed = flush(flushable, remaining_millis) is not False and flushed
        except Exception:  # one failure must not stop the others flushing
            failed(flushable)
            flushed = False
    return flushed


def shutdown_all(processors: Sequence[SpanProcessor]) -> None:
    """Shut each processor down, logging (once) any that fails."""
    for processor in processors:
        try:
            processor.shutdown()
        except Exception:  # one processor's failure must not keep the others open
            swallowed(_logger, "shutdown", "a span processor failed to shut down")


def hand(processor: SpanProcessor, span: ReadableSpan, content: Content | None) -> None:
    """Give ``span`` to ``processor``: with its content to a wrapping link, as a plain ``on_end`` else."""
    if isinstance(processor, WrappingProcessor):
        processor.receive(span, content)
    else:
        processor.on_end(span)


def forward(processors: Sequence[SpanProcessor], span: ReadableSpan, content: Content | None) -> None:
    """:func:`hand` ``span`` to each processor; one that raises is logged once and counted."""
    for processor in processors:
        try:
            hand(processor, span, content)
        except Exception:  # one exporter's failure must not keep the span from the others
            swallowed(_logger, "on_end", "a span processor failed in on_end")


def forward_batch(
    processors: Sequence[SpanProcessor],
    items: Sequence[Handed],
    *,
    failure_key: str = "on_end",
    failure_message: str = "a span processor failed in on_end",
    logger: logging.Logger = _logger,
) -> None:
    """:func:`forward` each of ``items``, in order, but a processor at a time: a wrapping link takes the
    whole batch (:meth:`WrappingProcessor.receive_batch`), any other processor its ``on_end`` of each.

    On the chain's worker only: as the worker does, it outlives any exception of a processor, even
    ``sys.exit()`` in a user's ``on_end``; each is logged once (on ``logger``) and counted under
    ``failure_key``, and costs no other span and no other processor.
    """
    for processor in processors:
        if isinstance(processor, WrappingProcessor):
            try:
                processor.receive_batch(items)
            except BaseException:  # receive_batch guards each span; this is the last line
                swallowed(logger, failure_key, failure_message)
            continue
        for span, _ in items:
            try:
                processor.on_end(span)
            except BaseException:  # even sys.exit() in a processor: the worker must outlive it
                swallowed(logger, failure_key, failure_message)


def _start_hooks_of(processor: SpanProcessor) -> tuple[StartHook, ...]:
    """What ``processor`` runs when a span starts: a wrapping link's hooks (its own and its downstream's),
    nothing for a processor that keeps the base class's ``on_start`` (it does nothing), else its
    ``on_start``."""
    if isinstance(processor, WrappingProcessor) and type(processor).on_start is WrappingProcessor.on_start:
        return processor.start_hooks()
    if type(processor).on_start is SpanProcessor.on_start:
        return ()
    return (processor.on_start,)


class WrappingProcessor(SpanProcessor):
    """A processor that enriches ended spans and forwards them, with their content, to ``downstream``.

    Subclasses override :meth:`process`. It runs on the chain's worker thread (see
    ``OffThreadProcessor``); an exception in it is logged once and counted, and the span is forwarded
    unenriched, so no span is ever lost because of us.

    While a wrapping processor is alive the process-wide ContentBuffer has a consumer, so instrumentors
    fill it; :meth:`shutdown` lets it go.
    """

    def __init__(self, downstream: Sequence[SpanProcessor]) -> None:
        self._downstream = tuple(downstream)
        self._consuming = True
        # What on_start runs, flattened once (the links below are built before this one): each span
        # the app starts calls only the processors that do something then, not every link in turn.
        self._start_hooks: tuple[StartHook, ...] = (
            *self._own_start_hooks(),
            *(hook for processor in self._downstream for hook in _start_hooks_of(processor)),
        )
        content_buffer().add_consumer()

    @property
    def downstream(self) -> tuple[SpanProcessor, ...]:
        """The processors this one forwards to."""
        return self._downstream

    def process(self, span: ReadableSpan, content: Content | None) -> ReadableSpan:
        """Return the span to forward: ``span`` itself or an enriched copy. The default forwards it as is.

        ``content`` is what the span said and was asked (model spans) or called with (tool spans), in
        process, whether or not it is exported; None when neither the instrumentor nor a capture had it.
        """
        return span

    def _own_start_hooks(self) -> tuple[StartHook, ...]:
        """What this link itself runs when a span starts (nothing by default); called once, at
        construction. A hook that must not be counted as a downstream failure guards itself."""
        return ()

    def start_hooks(self) -> tuple[StartHook, ...]:
        """What this link and the links below it run when a span starts, in order."""
        return self._start_hooks

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for hook in self._start_hooks:
            try:
                hook(span, parent_context=parent_context)
            except Exception:  # a downstream processor must not break the span's start in the app
                swallowed(_logger, "on_start", "a span processor failed in on_start")

    def on_end(self, span: ReadableSpan) -> None:
        """A span from outside the chain: take its content (once) and :meth:`receive` it."""
        try:
            content = take_content(span)
        except Exception:  # content we cannot read: the span still goes through, checked without it
            swallowed(_logger, "content.take", "tallyspan could not read a span's content")
            content = None
        self.receive(span, content)

    def receive(self, span: ReadableSpan, content: Content | None) -> None:
        """A span from the link above, with its content: process it and forward the result."""
        try:
            forwarded = self.process(span, content)
        except Exception:  # our enrichment failed: forward the span as it came rather than lose it
            swallowed(_logger, f"process.{type(self).__name__}", f"{type(self).__name__} failed on a span")
            forwarded = span
        forward(self._downstream, forwarded, content)

    def receive_batch(self, items: Sequence[Handed]) -> None:
        """Spans from the link above, in order, on the chain's worker: :meth:`receive` each, but the
        batch goes down a link at a time (:func:`forward_batch`). A subclass that overrides
        :meth:`receive` gets each span through it."""
        if type(self).receive is not WrappingProcessor.receive:
            for span, content in items:
                try:
                    self.receive(span, content)
                except BaseException:  # on the worker: this span's failure costs no other span
                    swallowed(_logger, "on_end", "a span processor failed in on_end")
            return
        processed: list[Handed] = []
        for span, content in items:
            try:
                forwarded = self.process(span, content)
            except BaseException:  # on the worker, as in receive: forward the span as it came
                swallowed(
                    _logger, f"process.{type(self).__name__}", f"{type(self).__name__} failed on a span"
                )
                forwarded = span
            processed.append((forwarded, content))
        forward_batch(self._downstream, processed)

    def forget(self, span: ReadableSpan) -> None:
        """``span`` was dropped before reaching :meth:`on_end` (a full queue): free what is kept for it.

        Called on the app's thread, so it must be cheap; the default passes it down the chain.
        """
        for processor in self._downstream:
            if isinstance(processor, WrappingProcessor):
                processor.forget(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return flush_all(self._downstream, timeout_millis)

    def shutdown(self) -> None:
        if self._consuming:
            self._consuming = False
            content_buffer().remove_consumer()
        shutdown_all(self._downstream)
