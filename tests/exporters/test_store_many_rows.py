"""Many rows per statement (``Rows.write``): the same tables as one statement per row, in a handful of
statements, so the store's writer lets go of the GIL a handful of times per batch, not once per row."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from tallyspan import semconv
from tallyspan._store._store_schema import VIOLATIONS, connect
from tallyspan_exporters._store import _SPAN_COLUMNS, _Batch
from tallyspan_exporters._writer import (
    MAX_ROWS_PER_STATEMENT,
    MAX_VARIABLES_PER_STATEMENT,
    Rows,
    delete_sql,
    insert_sql,
    rows_per_statement,
    variables_per_statement,
)

_VIOLATION_COLUMNS = ("trace_id", "span_id", "stage", "type", "failure_class", "detail")


def _select(path: Path, sql: str) -> list[tuple[object, ...]]:
    db = connect(path)
    try:
        return [tuple(row) for row in db.execute(sql)]
    finally:
        db.close()


def _write(path: Path, rows: Rows) -> list[str]:
    """Write ``rows`` in one transaction; the statements SQLite ran."""
    db = connect(path)
    ran: list[str] = []
    try:
        db.set_trace_callback(ran.append)
        with db:
            rows.write(db)
    finally:
        db.close()
    return [sql for sql in ran if sql not in ("BEGIN ", "COMMIT")]


def _one_statement_per_row(path: Path, statements: list[tuple[str, list[tuple[object, ...]]]]) -> None:
    db = connect(path)
    try:
        with db:
            for sql, parameters in statements:
                for row in parameters:
                    db.execute(sql, row)
    finally:
        db.close()


def _span_rows(count: int, keys: int, rng: random.Random) -> list[tuple[object, ...]]:
    rows = []
    for _ in range(count):
        key = rng.randrange(keys)  # some spans come twice, with other values: the later one must stay
        row: list[object] = []
        for column in _SPAN_COLUMNS:
            if column == "trace_id":
                row.append(f"{key:032x}")
            elif column == "span_id":
                row.append(f"{key:016x}")
            elif column.endswith(("_nano", "_ns", "_tokens", "_count")):
                row.append(rng.randrange(10**12))
            else:
                row.append(f"{column}-{rng.randrange(10**6)}")
        rows.append(tuple(row))
    return rows


@pytest.mark.parametrize("count", [1, 2, 3, 31, 32, 33, 100, 255, 256, 257, 1000])
def test_manyrows_per_statement_store_what_one_statement_per_row_stores(tmp_path: Path, count: int) -> None:
    sql = insert_sql("spans", _SPAN_COLUMNS, verb="INSERT OR REPLACE")
    rows = _span_rows(count, keys=max(1, count * 2 // 3), rng=random.Random(count))
    written = Rows()
    written.add(sql, rows)
    ran = _write(tmp_path / "many.db", written)
    _one_statement_per_row(tmp_path / "reference.db", [(sql, rows)])
    query = "SELECT * FROM spans ORDER BY trace_id, span_id"
    assert _select(tmp_path / "many.db", query) == _select(tmp_path / "reference.db", query)
    # 23 columns: 256 rows a statement (8,192 // 23 = 356 fit), the rest in powers of two.
    full, rest = divmod(count, 256)
    assert len(ran) == full + rest.bit_count()


def test_batches_of_the_same_size_are_each_written_whole(tmp_path: Path) -> None:
    """The statement shapes of a size are worked out once and reused: a later batch of the same size
    must be written as whole as the first."""
    sql = insert_sql("spans", _SPAN_COLUMNS)
    for batch in range(3):
        rows = [
            (f"{batch:030x}{key:02x}", *row[1:])
            for key, row in enumerate(_span_rows(37, 1, random.Random(batch)))
        ]
        written = Rows()
        written.add(sql, rows)
        assert len(_write(tmp_path / "many.db", written)) == 3  # 32 + 4 + 1
    assert _select(tmp_path / "many.db", "SELECT count(*) FROM spans") == [(3 * 37,)]


def test_a_delete_of_many_keys_removes_exactly_their_rows_through_the_index(tmp_path: Path) -> None:
    rng = random.Random(3)
    insert = insert_sql(VIOLATIONS, _VIOLATION_COLUMNS)
    violations = [
        (f"{key:032x}", f"{key:016x}", "stage", f"type-{number}", None, None)
        for key in range(200)
        for number in range(rng.randrange(4))
    ]
    deleted = [(f"{key:032x}", f"{key:016x}") for key in rng.sample(range(250), 97)]
    delete = delete_sql(VIOLATIONS, ("trace_id", "span_id"))
    rows = Rows()
    rows.add(insert, violations)
    rows.add(delete, deleted)
    ran = _write(tmp_path / "many.db", rows)
    _one_statement_per_row(tmp_path / "reference.db", [(insert, violations), (delete, deleted)])  # type: ignore[list-item]
    query = f"SELECT * FROM {VIOLATIONS} ORDER BY trace_id, span_id, type"
    remaining = _select(tmp_path / "many.db", query)
    assert remaining == _select(tmp_path / "reference.db", query)
    assert {row[:2] for row in remaining}.isdisjoint(deleted)
    assert len(remaining) < len(violations)
    assert len([sql for sql in ran if sql.startswith("DELETE")]) == 1 + 1 + 1  # 64 + 32 + 1 keys
    db = connect(tmp_path / "many.db")
    try:
        plan = " ".join(str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {delete}", deleted[0]))
    finally:
        db.close()
    assert f"USING INDEX {VIOLATIONS}_span" in plan
    assert f"SCAN {VIOLATIONS}" not in plan


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        (insert_sql("t", [f"c{index}" for index in range(23)]), MAX_ROWS_PER_STATEMENT),
        (insert_sql("t", ["a", "b", "c", "d", "e", "f"]), MAX_ROWS_PER_STATEMENT),
        (insert_sql("t", ["a"], verb="INSERT OR REPLACE"), MAX_ROWS_PER_STATEMENT),
        # 8,192 // 100 = 81 rows: the power of two below.
        (insert_sql("t", [f"c{index}" for index in range(100)]), 64),
        # One row is over the cap already.
        (insert_sql("t", [f"c{index}" for index in range(MAX_VARIABLES_PER_STATEMENT + 1)]), 1),
        (delete_sql("t", ("a", "b")), MAX_ROWS_PER_STATEMENT),
        ("INSERT INTO t (a, b) VALUES (?, 'fixed')", 1),  # not a row of placeholders only
        ("INSERT INTO t (a, b) SELECT ?, b FROM u WHERE c IN (VALUES (?))", 1),  # not all parameters
        ("DELETE FROM t WHERE a = ? AND b = ?", 1),
        ("UPDATE t SET a = ? WHERE b = ?", 1),
    ],
)
def test_only_statements_ending_in_one_row_of_all_their_placeholders_take_many_rows(
    sql: str, rows: int
) -> None:
    assert rows_per_statement(sql) == rows


def test_a_statement_takes_the_capped_parameters_where_sqlite_allows_them() -> None:
    # Every SQLite since 3.32 allows 32,766 (Debian's 250,000): the cap, not the old lowest limit of 999.
    assert sqlite3.sqlite_version_info >= (3, 32, 0)
    assert variables_per_statement() == MAX_VARIABLES_PER_STATEMENT


def test_a_statement_of_the_most_parameters_is_written(tmp_path: Path) -> None:
    """A statement at the cap is within SQLite's limit: the rows are written, not refused."""
    columns = [f"c{index}" for index in range(32)]  # 8,192 // 32 = 256 rows a statement, at the cap
    db = connect(tmp_path / "wide.db")
    try:
        db.execute(f"CREATE TABLE wide ({', '.join(columns)})")
        rows = Rows()
        rows.add(insert_sql("wide", columns), [tuple(range(row, row + 32)) for row in range(511)])
        ran: list[str] = []
        db.set_trace_callback(ran.append)
        with db:
            rows.write(db)
        assert len([sql for sql in ran if sql.startswith("INSERT")]) == 1 + 8  # 256, then 128 + 64 + ... + 1
        assert tuple(db.execute("SELECT count(*), sum(c31) FROM wide").fetchone()) == (
            511,
            sum(range(31, 542)),
        )
    finally:
        db.close()


def _chat_span(key: int, violation_types: list[str]) -> ReadableSpan:
    return ReadableSpan(
        name="chat bench-model",
        context=SpanContext(key, key, is_remote=False, trace_flags=TraceFlags(1)),
        attributes={semconv.GEN_AI_OPERATION_NAME: "chat", semconv.VIOLATION_TYPES: tuple(violation_types)},
        events=[Event(semconv.EVENT_VIOLATION, {semconv.VIOLATION_TYPE: kind}) for kind in violation_types],
        start_time=1,
        end_time=2,
    )


def test_a_span_exported_twice_in_one_batch_keeps_only_its_later_violations(tmp_path: Path) -> None:
    batch = _Batch()
    batch.add(_chat_span(7, ["too_short", "wrong_language"]))
    batch.add(_chat_span(8, ["refusal"]))
    batch.add(_chat_span(7, ["missing_section"]))  # the same span again, checked again
    _write(tmp_path / "store.db", batch.rows())
    assert _select(
        tmp_path / "store.db", f"SELECT span_id, type FROM {VIOLATIONS} ORDER BY span_id, type"
    ) == [
        (f"{7:016x}", "missing_section"),
        (f"{8:016x}", "refusal"),
    ]
    assert _select(tmp_path / "store.db", "SELECT span_id, violation_types FROM spans ORDER BY span_id") == [
        (f"{7:016x}", '["missing_section"]'),
        (f"{8:016x}", '["refusal"]'),
    ]


def test_a_batch_of_spans_is_written_in_a_handful_of_statements(tmp_path: Path) -> None:
    batch = _Batch()
    for key in range(1, 201):
        batch.add(_chat_span(key, ["too_short"] if key % 2 else []))
    ran = _write(tmp_path / "store.db", batch.rows())
    # 200 spans (their None columns left out) = 128 + 64 + 8, as many deletes of their violations and
    # run rows (a lone model call is a run); 100 violations = 64 + 32 + 4.
    assert len(ran) == 3 + 3 + 3 + 3
    assert _select(tmp_path / "store.db", "SELECT count(*) FROM spans") == [(200,)]
    assert _select(tmp_path / "store.db", f"SELECT count(*) FROM {VIOLATIONS}") == [(100,)]
