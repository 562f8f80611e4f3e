"""The rows the store writes for what other producers put on spans: odd attribute types, violation
types as one string, violation events without all their fields, and the counters of each process."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tallyspan import semconv
from tallyspan._selfstats import count
from tallyspan._store._store_queries import open_store, process_counters
from tallyspan._store._store_schema import connect
from tallyspan_exporters import SQLiteSpanExporter
from tallyspan_exporters._writer import Rows, insert_sql


@pytest.fixture
def tracer(db_path: Path) -> Iterator[trace.Tracer]:
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "billing"}))
    provider.add_span_processor(SimpleSpanProcessor(SQLiteSpanExporter(db_path)))
    yield provider.get_tracer("test")
    provider.shutdown()


def _write(db_path: Path, rows: Rows) -> None:
    """Write ``rows`` into the store at ``db_path`` in one transaction."""
    db = connect(db_path)
    try:
        with db:
            rows.write(db)
    finally:
        db.close()


def _select(db_path: Path, sql: str) -> list[dict[str, object]]:
    db = connect(db_path)
    try:
        return [dict(row) for row in db.execute(sql)]
    finally:
        db.close()


def test_attributes_of_other_types_are_stored_as_text_or_left_out(
    tracer: trace.Tracer, db_path: Path
) -> None:
    with tracer.start_as_current_span(
        "chat 答え",
        kind=trace.SpanKind.SERVER,
        attributes={
            semconv.STAGE: 3,
            semconv.GEN_AI_OPERATION_NAME: "chat",
            semconv.GEN_AI_USAGE_INPUT_TOKENS: True,  # a bool is no token count
            semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
            semconv.VIOLATION_TYPES: "too_short",  # one type, as a string
            "z.last": ("a", "b"),
            "a.first": "日本語",
        },
    ):
        pass
    (row,) = _select(db_path, "SELECT * FROM spans")
    assert row["kind"] == "server"
    assert row["stage"] == "3"
    assert (row["input_tokens"], row["output_tokens"]) == (None, 7)
    assert row["violation_types"] == '["too_short"]'
    assert row["violation_count"] == 1  # one row per listed type
    assert row["service_name"] == "billing"
    assert row["status_description"] is None
    attributes = str(row["attributes"])
    assert attributes.startswith('{"a.first":"日本語"')  # sorted keys, not escaped
    assert json.loads(attributes)["z.last"] == ["a", "b"]
    assert _select(db_path, "SELECT type, failure_class, detail FROM violations") == [
        {"type": "too_short", "failure_class": "contract_violation", "detail": None}
    ]


def test_violation_types_of_another_shape_are_an_empty_list(tracer: trace.Tracer, db_path: Path) -> None:
    with tracer.start_as_current_span("chat m", attributes={semconv.VIOLATION_TYPES: 5}):
        pass
    (row,) = _select(db_path, "SELECT violation_types, violation_count FROM spans")
    assert row == {"violation_types": "[]", "violation_count": 0}
    assert _select(db_path, "SELECT * FROM violations") == []


def test_a_violation_event_without_its_fields_is_still_a_row(tracer: trace.Tracer, db_path: Path) -> None:
    with tracer.start_as_current_span(
        "chat m",
        attributes={semconv.VIOLATION_TYPES: ["too_short", "not_json"], semconv.VIOLATION_COUNT: True},
    ) as span:
        span.add_event(semconv.EVENT_VIOLATION, {})
        span.add_event("another event", {semconv.VIOLATION_TYPE: "not_json"})
    assert _select(db_path, "SELECT type, failure_class, detail FROM violations") == [
        {"type": "", "failure_class": None, "detail": None}
    ]  # the events are the rows: the listed types are not added again
    assert _select(db_path, "SELECT violation_count FROM spans") == [{"violation_count": 1}]


def test_the_counters_are_written_once_per_change_with_the_service_name(db_path: Path) -> None:
    exporter = SQLiteSpanExporter(db_path)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "billing"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    count("dropped.spans", 2)
    tracer.start_span("one").end()
    before = _select(db_path, "SELECT key, value, service_name, pid, time_unix_nano FROM self_stats")
    tracer.start_span("two").end()  # nothing changed: no new counter row
    exporter.force_flush()
    after = _select(db_path, "SELECT key, value, service_name, pid, time_unix_nano FROM self_stats")
    assert after == before
    assert [(row["key"], row["value"], row["service_name"], row["pid"]) for row in after] == [
        ("dropped.spans", 2, "billing", os.getpid())
    ]
    count("dropped.spans")
    exporter.force_flush()  # counters alone: the service name is remembered
    with open_store(db_path) as db:
        (process,) = process_counters(db)
    assert process.counts == {"dropped.spans": 3}
    assert _select(db_path, "SELECT service_name FROM self_stats") == [{"service_name": "billing"}]
    provider.shutdown()


def test_the_declared_violation_count_wins_over_the_events_kept(tracer: trace.Tracer, db_path: Path) -> None:
    """Span limits may drop events: the count the checks declared is the count."""
    with tracer.start_as_current_span(
        "chat m", attributes={semconv.VIOLATION_TYPES: ["too_short"], semconv.VIOLATION_COUNT: 5}
    ) as span:
        span.add_event(semconv.EVENT_VIOLATION, {semconv.VIOLATION_TYPE: "too_short"})
    assert _select(db_path, "SELECT violation_count FROM spans") == [{"violation_count": 5}]
    assert len(_select(db_path, "SELECT * FROM violations")) == 1


def test_violation_types_of_another_producer_are_stored_unescaped(
    tracer: trace.Tracer, db_path: Path
) -> None:
    with tracer.start_as_current_span("chat m", attributes={semconv.VIOLATION_TYPES: ["言語", "too_short"]}):
        pass
    assert _select(db_path, "SELECT violation_types FROM spans") == [
        {"violation_types": '["言語","too_short"]'}
    ]


_NOT_NULL = {
    "spans": {"trace_id", "span_id", "name", "kind", "status_code", "violation_count", "violation_types",
              "attributes"},
    "runs": {"trace_id", "span_id", "name", "status_code"},
}  # fmt: skip


@pytest.mark.parametrize("table", ["spans", "runs"])
def test_rows_without_their_none_columns_store_what_the_full_insert_stores(
    tmp_path: Path, table: str
) -> None:
    """Rows with None left out of the INSERT (``_add_rows_without_none``) against the plain INSERT of
    every column: random None patterns, runs of the same pattern, and spans written twice in one batch."""
    from tallyspan_exporters._store import _RUN_COLUMNS, _SPAN_COLUMNS, _add_rows_without_none

    columns = _SPAN_COLUMNS if table == "spans" else _RUN_COLUMNS
    rng = random.Random(13)
    not_null = _NOT_NULL[table]
    rows: list[tuple[object, ...]] = []
    for number in range(400):
        key = rng.randrange(300)  # some spans come twice, with other values
        row: list[object] = []
        for column in columns:
            if column == "trace_id":
                row.append(f"{key:032x}")
            elif column == "span_id":
                row.append(f"{key:016x}")
            elif column not in not_null and rng.random() < (0.9 if number % 50 < 40 else 0.3):
                row.append(None)
            elif column.endswith(("_nano", "_ns", "_tokens", "_count")):
                row.append(rng.randrange(10**12))
            else:
                row.append(f"{column}-{rng.randrange(1000)}")
        rows.append(tuple(row))
    reference, omitted = tmp_path / "reference.db", tmp_path / "omitted.db"
    full = Rows()
    full.add(insert_sql(table, columns, verb="INSERT OR REPLACE"), rows)
    left_out = Rows()
    _add_rows_without_none(left_out, table, columns, rows)
    assert len(left_out.statements) > 2  # several None patterns, several statements
    _write(reference, full)
    _write(omitted, left_out)
    query = f"SELECT * FROM {table} ORDER BY trace_id, span_id"
    assert _select(omitted, query) == _select(reference, query)
    assert len(_select(reference, query)) == len({row[0] for row in rows})


def test_run_rows_of_a_batch_store_what_the_full_insert_stores(tmp_path: Path) -> None:
    """Run rows through ``_Batch`` (unnamed runs without their agent and run name columns) against the
    plain INSERT of every column, on generated spans: named and unnamed, with and without operation,
    and run spans exported twice in one batch with other values."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    from tallyspan_exporters._store import _RUN_COLUMNS, _Batch

    rng = random.Random(5)
    batch = _Batch()
    plain: list[tuple[object, ...]] = []
    for _ in range(300):
        key = rng.randrange(120)
        attributes: dict[str, str | int] = {}
        choices: tuple[tuple[str, list[str | int]], ...] = (
            (semconv.GEN_AI_OPERATION_NAME, ["chat", "invoke_agent", 7]),
            (semconv.GEN_AI_AGENT_NAME, ["planner", 3]),
            (semconv.RUN_NAME, ["nightly"]),
        )
        for name, values in choices:
            if rng.random() < 0.4:
                attributes[name] = rng.choice(values)
        start = rng.choice([None, rng.randrange(10**12)])
        end = None if start is None else start + rng.randrange(10**9)
        span = ReadableSpan(
            name=f"span {key}",
            context=SpanContext(key + 1, key + 1, is_remote=False, trace_flags=TraceFlags(1)),
            attributes=attributes,
            start_time=start,
            end_time=end,
        )
        batch.add(span)
        text = {k: None if v is None else str(v) for k, v in attributes.items()}
        plain.append(
            (f"{key + 1:032x}", f"{key + 1:016x}", f"span {key}", text.get(semconv.GEN_AI_OPERATION_NAME),
             text.get(semconv.GEN_AI_AGENT_NAME), text.get(semconv.RUN_NAME), start, end, "UNSET")
        )  # fmt: skip
    full = Rows()
    full.add(insert_sql("runs", _RUN_COLUMNS, verb="INSERT OR REPLACE"), plain)
    keyed = batch.rows()
    assert len({sql for sql, _ in keyed.statements if "INTO runs" in sql}) == 2  # named and unnamed
    written = []
    for path, rows in ((tmp_path / "plain.db", full), (tmp_path / "keyed.db", keyed)):
        _write(path, rows)
        written.append(_select(path, "SELECT * FROM runs ORDER BY trace_id, span_id"))
    assert written[1] == written[0]
    assert len(written[0]) == len({row[0] for row in plain})


@pytest.mark.parametrize("table", ["spans", "runs"])
def test_nullable_span_and_run_columns_have_no_default(db_path: Path, table: str) -> None:
    """A None left out of the INSERT is stored NULL only while no nullable column has a default."""
    db = connect(db_path)
    try:
        columns = list(db.execute(f"PRAGMA table_info({table})"))
    finally:
        db.close()
    assert [row["name"] for row in columns if not row["notnull"] and row["dflt_value"] is not None] == []


def test_status_and_kind_names_are_the_enum_names() -> None:
    from opentelemetry.trace import SpanKind, StatusCode

    from tallyspan_exporters._store import _KIND_NAMES, _STATUS_NAMES

    assert _STATUS_NAMES == {StatusCode.UNSET: "UNSET", StatusCode.OK: "OK", StatusCode.ERROR: "ERROR"}
    assert _KIND_NAMES == {
        SpanKind.INTERNAL: "internal",
        SpanKind.SERVER: "server",
        SpanKind.CLIENT: "client",
        SpanKind.PRODUCER: "producer",
        SpanKind.CONSUMER: "consumer",
    }


def test_texts_reads_each_key_as_text_does() -> None:
    """``_texts`` against ``_text`` of each key, on attributes of many generated kinds and absences."""
    from tallyspan_exporters._store import _TEXT_KEYS, _text, _texts

    class Label(str):
        pass

    rng = random.Random(7)
    kinds = [None, "", "gpt", Label("sub"), 0, 12, 1.5, True, False, ("a", "b"), ["c"], b"x"]
    for _ in range(500):
        attributes = {key: rng.choice(kinds) for key in _TEXT_KEYS if rng.random() < 0.7}
        attributes["other"] = "x"
        expected = [_text(attributes.get(key)) for key in _TEXT_KEYS]
        got = _texts(attributes)
        assert got == expected
        assert [type(value) for value in got] == [type(value) for value in expected]


def test_spans_of_two_services_alternating_each_keep_their_own_service_name(db_path: Path) -> None:
    """The store keeps the service name of the last resource read: another resource must not get it."""
    exporter = SQLiteSpanExporter(db_path)
    tracers = []
    for service in ("billing", "search"):
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracers.append(provider.get_tracer("test"))
    for index in range(4):
        tracers[index % 2].start_span(f"call {index}").end()
    rows = _select(db_path, "SELECT name, service_name FROM spans ORDER BY name")
    assert [(row["name"], row["service_name"]) for row in rows] == [
        ("call 0", "billing"),
        ("call 1", "search"),
        ("call 2", "billing"),
        ("call 3", "search"),
    ]
    exporter.shutdown()
