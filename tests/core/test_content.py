"""ContentBuffer: in-process, bounded, filled only while a processor consumes it."""

from __future__ import annotations

import tallyspan
from tallyspan._content import ContentBuffer, ModelContent, ToolContent


def test_put_is_a_no_op_without_a_consumer() -> None:
    buffer = ContentBuffer()
    buffer.put(1, ModelContent("text"))
    assert len(buffer) == 0
    assert buffer.active is False


def test_pop_returns_and_removes_the_content_of_a_span() -> None:
    buffer = ContentBuffer()
    buffer.add_consumer()
    content = ModelContent("answer", prompt="question")
    buffer.put(7, content)
    assert buffer.peek(7) is content
    assert buffer.pop(7) is content
    assert buffer.pop(7) is None
    assert len(buffer) == 0


def test_oldest_entries_are_dropped_and_counted_past_the_bound() -> None:
    buffer = ContentBuffer(max_entries=3)
    buffer.add_consumer()
    for span_id in range(5):
        buffer.put(span_id, ModelContent(str(span_id)))
    assert len(buffer) == 3
    assert buffer.pop(0) is None
    assert buffer.pop(1) is None
    assert buffer.pop(4) == ModelContent("4")
    assert tallyspan.stats()["dropped.content"] == 2


def test_the_last_consumer_leaving_empties_the_buffer() -> None:
    buffer = ContentBuffer()
    buffer.add_consumer()
    buffer.add_consumer()
    buffer.put(1, ModelContent("x"))
    buffer.remove_consumer()
    assert len(buffer) == 1
    buffer.remove_consumer()
    assert len(buffer) == 0
    assert buffer.active is False


def test_huge_entries_are_bounded_by_their_text_too() -> None:
    """A few huge answers whose spans never end must not pin memory; the newest is always kept."""
    buffer = ContentBuffer(max_entries=100, max_chars=1_000)
    buffer.add_consumer()
    buffer.put(1, ModelContent("a" * 400, prompt="q" * 100))
    buffer.put(2, ModelContent("b" * 400))
    assert buffer.chars == 900
    buffer.put(3, ModelContent("c" * 300))  # 1,200 chars: the oldest goes
    assert buffer.pop(1) is None
    assert buffer.chars == 700
    buffer.put(4, ToolContent(arguments="x" * 5_000))  # larger than the whole budget: kept alone
    assert len(buffer) == 1
    assert buffer.chars == 5_000
    assert tallyspan.stats()["dropped.content"] == 3
    assert isinstance(buffer.pop(4), ToolContent)
    assert buffer.chars == 0


def test_replacing_an_entry_does_not_count_its_text_twice() -> None:
    buffer = ContentBuffer(max_chars=100)
    buffer.add_consumer()
    buffer.put(1, ModelContent("a" * 60))
    buffer.put(1, ModelContent("b" * 60))
    assert len(buffer) == 1
    assert buffer.chars == 60
    assert "dropped.content" not in tallyspan.stats()
