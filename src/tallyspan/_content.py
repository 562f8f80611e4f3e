"""The ContentBuffer: model output and tool arguments handed from instrumentors to our processors.

Message content is private by default: it is exported as span attributes only when the user opts in.
The checks still need it, so instrumentors put it here, in process, keyed by span id, and the checks and
ledger processors take it out when the span ends. The buffer is bounded: when nothing consumes it (no
processor installed) or a span never ends, the oldest entries are dropped and counted, never leaked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from tallyspan._fork import renew_lock_after_fork
from tallyspan._selfstats import count

__all__ = [
    "Content",
    "ContentBuffer",
    "ModelContent",
    "ToolCallContent",
    "ToolContent",
    "content_buffer",
]


@dataclass(frozen=True)
class ToolCallContent:
    """A tool call the model requested in its response."""

    name: str
    arguments: str
    """The raw argument text as the model produced it (usually JSON, may be malformed)."""
    call_id: str | None = None


@dataclass(frozen=True)
class ModelContent:
    """What a model span produced and was asked, for the checks."""

    output_text: str
    """The text of the answer (the first choice), reasoning fields excluded."""
    tool_calls: tuple[ToolCallContent, ...] = ()
    prompt: str | None = None
    """The last user message, for the answer_to_other_question check."""
    reasoning_text: str = ""
    """Reasoning the provider returned in a separate field (reasoning_content, thinking blocks)."""


@dataclass(frozen=True)
class ToolContent:
    """What a tool execution was called with and returned, for the ledger."""

    arguments: Mapping[str, Any] | str | None = None
    result: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)


Content: TypeAlias = ModelContent | ToolContent
"""What a span hands the chain: a model call's output and prompt, or a tool call's arguments and result."""

#: The worker's queue (tallyspan_processors' DEFAULT_MAX_QUEUE_SIZE, 8192) and half again for spans
#: between the put and their end: every model span waiting there keeps its content for the checks. The
#: worker frees the entries of the spans it drops.
DEFAULT_MAX_ENTRIES = 12288
#: Characters of text the buffer holds at most (about 64-256 MB): entries are counted, but a few
#: huge answers whose spans never end (abandoned streams of a consumer that never pops) must not
#: pin gigabytes. The newest entry is always kept, whatever its size.
DEFAULT_MAX_CHARS = 64 * 1024 * 1024


def _chars(content: Content) -> int:
    """The text an entry holds, in characters: what makes one entry large."""
    if isinstance(content, ModelContent):
        size = len(content.output_text) + len(content.reasoning_text) + len(content.prompt or "")
        if content.tool_calls:  # most answers have none: no generator for them (on the app's thread)
            size += sum(len(call.arguments) for call in content.tool_calls)
        return size
    arguments = content.arguments
    return len(arguments) if isinstance(arguments, str) else 0


class ContentBuffer:
    """A bounded, thread-safe map from span id to the content of that span."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._chars = 0
        self._entries: OrderedDict[int, Content] = OrderedDict()
        self._lock = threading.Lock()
        renew_lock_after_fork(self)  # the worker pops under this lock; a fork then must not freeze puts
        self._consumers = 0
        self.active = False
        """True while a processor consumes the buffer; instrumentors skip the put otherwise. A plain
        attribute, kept by the consumers' count: instrumentors read it at every model call."""

    def add_consumer(self) -> None:
        """Called by a processor that will pop entries, so instrumentors start filling the buffer."""
        with self._lock:
            self._consumers += 1
            self.active = True

    def remove_consumer(self) -> None:
        """Undo :meth:`add_consumer`; the last consumer to go empties the buffer."""
        with self._lock:
            self._consumers = max(0, self._consumers - 1)
            self.active = self._consumers > 0
            if self._consumers == 0:
                self._entries.clear()
                self._chars = 0

    def put(self, span_id: int, content: Content) -> None:
        """Keep ``content`` for the span ``span_id`` until it is popped (no-op with no consumer)."""
        if not self._consumers:
            return
        size = _chars(content)
        with self._lock:
            replaced = self._entries.pop(span_id, None)
            if replaced is not None:
                self._chars -= _chars(replaced)
            self._entries[span_id] = content
            self._chars += size
            while len(self._entries) > self._max_entries or (
                self._chars > self._max_chars and len(self._entries) > 1
            ):
                _, evicted = self._entries.popitem(last=False)
                self._chars -= _chars(evicted)
                count("dropped.content")

    def pop(self, span_id: int) -> Content | None:
        """Remove and return the content of ``span_id``, or None."""
        with self._lock:
            content = self._entries.pop(span_id, None)
            if content is not None:
                self._chars -= _chars(content)
            return content

    @property
    def chars(self) -> int:
        """Characters of text held now."""
        with self._lock:
            return self._chars

    def peek(self, span_id: int) -> Content | None:
        """Return the content of ``span_id`` without removing it, or None."""
        with self._lock:
            return self._entries.get(span_id)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


_BUFFER = ContentBuffer()


def content_buffer() -> ContentBuffer:
    """Return the process-wide buffer shared by instrumentors and processors."""
    return _BUFFER
