"""The delivery path's promises, each pinned by a scenario whose expected outcome is written by hand.

- the run span of an unbalanced ledger is a verdict, kept in the spool, even with status OK;
- ``force_flush()`` answers False after a loss even when nothing is outstanding any more;
- ``Retry-After`` is honoured on 503 as on 429 (and read from no other status);
- shutdown releases the spool's rows, so the next process sends them at once;
- a forked child owns only the rows it writes, never its parent's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags
from tests.forking import run_forked
from tests.otlp_faults import FaultyReceiver, span_key

import tallyspan
from tallyspan import semconv
from tallyspan._config import (
    ENV_EXPORT_TIMEOUT,
    ENV_RETRY_MAX,
    ENV_SHUTDOWN_TIMEOUT,
    ExportSettings,
    ShutdownBudget,
)
from tallyspan_exporters._delivery import Attempt, Outbox, RetryHeldError
from tallyspan_exporters._otlp import SPAN_CODEC, ObservedSession
from tallyspan_exporters._spool import Spool

TRACE_ID = 0x5B8EFFF798038103D269B633813FC60C


def _span(span_id: int, name: str = "chat m", *, body: str = "") -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=SpanContext(TRACE_ID, span_id, is_remote=False, trace_flags=TraceFlags(1)),
        resource=Resource({"service.name": "agent"}),
        attributes={"padding": body} if body else {},
        status=Status(StatusCode.UNSET),
        start_time=1_000,
        end_time=2_000,
        instrumentation_scope=InstrumentationScope("test"),
    )


class Backend(SpanExporter):
    """A backend whose answer the test sets: ``cause`` None accepts, else the export fails with it."""

    def __init__(self) -> None:
        self.cause: str | None = None
        self.retry_after_s: float | None = None
        self.accepted: list[str] = []
        self.exports = 0
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exports += 1
        self.entered.set()
        self.release.wait(10)
        if self.cause is None:
            self.accepted.extend(span.name for span in spans)
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE

    def reset(self) -> None:
        pass

    def last(self) -> Attempt:
        return Attempt(self.cause, self.retry_after_s if self.cause else None)


def _outbox(backend: Backend, spool: Spool | None, *, queue_size: int = 100) -> Outbox[ReadableSpan]:
    return Outbox(
        backend,
        signal="traces",
        codec=SPAN_CODEC,
        spool=spool,
        settings=ExportSettings(retry_max_s=0.05, queue_size=queue_size),
        budget=ShutdownBudget(1.0),
        attempts=backend,
    )


def _owners(path: Path) -> list[str | None]:
    db = sqlite3.connect(path)
    try:
        return [row[0] for row in db.execute("SELECT owner FROM records ORDER BY seq")]
    finally:
        db.close()


# --- what the spool keeps ------------------------------------------------------------------------------


def test_the_run_span_of_unbalanced_books_is_spooled_even_with_status_ok(
    receiver: FaultyReceiver,
    tracer_provider: TracerProvider,
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Status ERROR is off (``mark_error_status=False``): the run span's only verdict is its books, which
    do not balance (a call nobody logged). The backend is down; at exit the spool must hold that span,
    and only it: the tool call succeeded and the run has no model call."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv(ENV_EXPORT_TIMEOUT, "0.5")
    monkeypatch.setenv(ENV_RETRY_MAX, "0.2")
    monkeypatch.setenv(ENV_SHUTDOWN_TIMEOUT, "1.0")
    receiver.refuse()
    memory = InMemorySpanExporter()
    tallyspan.instrument(
        tracer_provider=tracer_provider,
        store=db_path,
        instrumentors=[],
        mark_error_status=False,
        span_processors=[SimpleSpanProcessor(memory)],
    )

    @tallyspan.tool
    def search(query: str, tool_call_id: str) -> str:
        return query

    try:
        with tallyspan.run("booker"):
            search("flights", tool_call_id="c1")  # never claimed: unlogged_call
    finally:
        tallyspan.uninstrument()

    spans = {span.name: span for span in memory.get_finished_spans()}
    assert sorted(spans) == ["execute_tool search", "invoke_agent booker"]
    run = spans["invoke_agent booker"]
    assert run.status.status_code is StatusCode.UNSET  # no ERROR to make it durable
    assert (run.attributes or {})[semconv.LEDGER_BALANCED] is False
    db = sqlite3.connect(tmp_path / "tallyspan.spool.db")
    try:
        spooled = [row[0] for row in db.execute("SELECT record_id FROM records WHERE signal = 'traces'")]
    finally:
        db.close()
    assert spooled == [span_key(run)]


def test_a_record_larger_than_the_whole_spool_is_a_loss_force_flush_reports(tmp_path: Path) -> None:
    """The spool cannot keep a record larger than itself (counted ``spool_full``): it is lost, though
    nothing is outstanding; the next flush says so, once."""
    backend = Backend()
    outbox = _outbox(backend, Spool(tmp_path / "s.db", max_bytes=2_000, max_age_s=3600))
    outbox.submit(_span(1, "too large", body="x" * 5_000), durable=True)
    outbox.submit(_span(2, "small"), durable=True)
    assert outbox.force_flush(5000) is False
    assert backend.accepted == ["small"]
    assert tallyspan.stats()["dropped.otlp.traces.spool_full"] == 1
    assert outbox.force_flush(5000) is True  # nothing lost since the last answer
    outbox.shutdown()


def test_force_flush_answers_false_after_losses_even_with_nothing_outstanding() -> None:
    """Clean spans beyond the queue are dropped while the backend holds one export; once everything
    submitted is either delivered or dropped, a flush has nothing to wait for, and must still say False."""
    backend = Backend()
    backend.release.clear()
    outbox = _outbox(backend, None, queue_size=2)
    outbox.submit(_span(1, "first"), durable=False)
    assert backend.entered.wait(10)  # "first" is being exported: the queue is empty again
    # Five more into a queue of two, one place of which "first" holds until it is accepted: the queue
    # keeps the newest, the oldest four are dropped.
    for number in range(2, 7):
        outbox.submit(_span(number, f"s{number}"), durable=False)
    deadline = time.monotonic() + 10
    while tallyspan.stats().get("dropped.otlp.traces.queue_full", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tallyspan.stats()["dropped.otlp.traces.queue_full"] == 4
    backend.release.set()
    deadline = time.monotonic() + 10
    while len(backend.accepted) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.accepted == ["first", "s6"]
    # The export returned; the outbox settles its tickets right after, under its lock.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with outbox._condition:
            if not outbox._outstanding:
                break
        time.sleep(0.01)
    with outbox._condition:
        assert not outbox._outstanding  # nothing to wait for: the flush answers from the losses alone
    assert outbox.force_flush(5000) is False
    assert outbox.force_flush(5000) is True
    outbox.shutdown()


def test_a_record_submitted_after_shutdown_is_a_loss_the_next_flush_reports() -> None:
    backend = Backend()
    outbox = _outbox(backend, None)
    outbox.submit(_span(1, "before"), durable=True)
    assert outbox.force_flush(5000) is True
    outbox.shutdown()
    outbox.submit(_span(2, "after"), durable=True)
    assert tallyspan.stats()["dropped.otlp.traces.after_shutdown"] == 1
    assert outbox.force_flush(5000) is False
    assert backend.accepted == ["before"]


# --- Retry-After -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (503, "7", 7.0),
        (429, "7", 7.0),
        (503, "0.5", 0.5),
        (500, "7", None),  # Retry-After means something on 429 and 503 only
        (503, None, None),
    ],
)
def test_retry_after_is_read_on_503_as_on_429(
    receiver: FaultyReceiver, status: int, header: str | None, expected: float | None
) -> None:
    receiver.fail(status, retry_after=header)
    session = ObservedSession("traces")
    response = session.post(f"{receiver.endpoint}/v1/traces", data=b"", timeout=5)
    assert response.status_code == status
    assert session.last() == Attempt(f"http_{status}", expected, 0, "")
    session.close()


def test_within_one_export_the_session_sends_no_retry_before_the_retry_after_it_was_given(
    receiver: FaultyReceiver,
) -> None:
    """What an exporter's own retry meets (those before the shared OTLP client, 1.39 among them, retry a
    503 after about a second whatever Retry-After says): the session refuses it, with the backend's answer
    kept as the attempt, until the time asked for has passed or the next export begins."""
    receiver.fail(503, retry_after="0.4")
    session = ObservedSession("traces")
    url = f"{receiver.endpoint}/v1/traces"
    assert session.post(url, data=b"", timeout=5).status_code == 503
    with pytest.raises(RetryHeldError):
        session.post(url, data=b"", timeout=5)
    assert session.last() == Attempt("http_503", 0.4, 0, "")
    with receiver.lock:
        assert [request.status for request in receiver.requests] == [503]
    time.sleep(0.45)  # what the backend asked for has passed: the same export may try again
    assert session.post(url, data=b"", timeout=5).status_code == 503
    session.reset()  # a new export: the outbox itself waited as asked
    assert session.post(url, data=b"", timeout=5).status_code == 503
    with receiver.lock:
        assert [request.status for request in receiver.requests] == [503, 503, 503]
    session.close()


def test_a_503_with_retry_after_holds_the_next_try_and_flushes_answer_false_meanwhile(
    receiver: FaultyReceiver,
) -> None:
    """The backend answers 503 and asks for 30 s: the outbox makes no other request before then, and a
    flush does not wait for it (it answers False at once)."""
    from tallyspan_exporters._otlp import OTLPSpanProcessor, otlp_span_exporter

    receiver.fail(503, retry_after="30")
    session = ObservedSession("traces")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        exporter = otlp_span_exporter("http/protobuf", timeout_s=2.0, session=session)
    processor = OTLPSpanProcessor(
        exporter, settings=ExportSettings(retry_max_s=0.05, spool_path=None), session=session
    )
    try:
        processor.on_end(_span(1))
        assert processor.force_flush(5000) is False
        assert receiver.received("/v1/traces") == 0
        with receiver.lock:
            assert [request.status for request in receiver.requests] == [503]
        started = time.monotonic()
        assert processor.force_flush(60_000) is False
        assert time.monotonic() - started < 30.0  # answered, not after its timeout (nor the 30 s asked for)
        with receiver.lock:
            assert [request.status for request in receiver.requests] == [503]  # no second try within 30 s
    finally:  # also when it failed: its sender would retry into the later tests (their counters)
        receiver.recover()
        with contextlib.suppress(Exception):
            processor.shutdown()


# --- the spool's rows across shutdown and fork ------------------------------------------------------------


def test_shutdown_releases_the_spools_rows_for_the_next_process(tmp_path: Path) -> None:
    backend = Backend()
    backend.cause = "connection"
    path = tmp_path / "s.db"
    outbox = _outbox(backend, Spool(path, max_bytes=1 << 20, max_age_s=3600))
    for number in range(3):
        outbox.submit(_span(number + 1, f"v{number}"), durable=True)
    assert outbox.force_flush(2000) is False
    assert len(_owners(path)) == 3
    outbox.shutdown()
    assert _owners(path) == [None, None, None]
    # The next process (here another spool of this one: another owner) takes them at once.
    following = Spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert [row.seq for row in following.claim("traces", 10) or []] == [1, 2, 3]
    following.close()


def test_a_forked_child_owns_only_the_rows_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    spool = Spool(path, max_bytes=1 << 20, max_age_s=3600)
    assert spool.append("traces", [("parent", "p")]) == [1]
    parent_owner = _owners(path)[0]
    assert parent_owner is not None
    assert f"|{os.getpid()}|" in parent_owner

    def child() -> bool:
        written = spool.append("traces", [("child", "c")])
        claimed = [row.record_id for row in spool.claim("traces", 10) or []]
        owners = _owners(path)
        return (
            written == [2]
            and claimed == ["child"]  # the parent's row is leased to the parent, which is alive
            and owners[0] == parent_owner
            and owners[1] is not None
            and f"|{os.getpid()}|" in owners[1]
        )

    assert run_forked(child) == 0
    # The child is gone: its row is taken over by the live parent, with the parent's own.
    assert [row.record_id for row in spool.claim("traces", 10) or []] == ["parent", "child"]
    assert _owners(path) == [parent_owner, parent_owner]
    spool.close()
