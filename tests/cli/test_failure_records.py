"""Failure-log records of one hand-made trace: which records, dated when, kept by which filter.

The trace is written out here field by field and the expected records by hand from it, so a filter that
means "all of the types" instead of "any", a run whose books balance but whose log protocol was broken,
or a failure dated by its start instead of its end, each gives a different answer than the one written.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tallyspan import semconv
from tallyspan._books._ledger import Discrepancy
from tallyspan._datasets._failure_logs import FailureFilter, failure_records
from tallyspan._store._store_traces import LedgerData, SpanData, TraceData, ViolationData

SECOND = 10**9
#: 2026-05-01T09:30:00Z in Unix nanoseconds.
T0 = int(datetime(2026, 5, 1, 9, 30, tzinfo=timezone.utc).timestamp()) * SECOND
TRACE = "0af7651916cd43dd8448eb211c80319c"
RUN, CHAT, TOOL = "00000000000000a1", "00000000000000c1", "00000000000000d1"


def _trace(*, balanced: bool, protocol_ok: bool) -> TraceData:
    """A run (0 s to 10 s) with a chat call that ran from 1 s to 5 s and broke two rules, and a tool call
    (6 s to 7 s); the run's books as given, with one protocol discrepancy."""
    run = SpanData(
        TRACE, RUN, None, "invoke_agent booker", semconv.OPERATION_INVOKE_AGENT, T0, T0 + 10 * SECOND, "UNSET",
        is_run=True, agent_name="booker",
    )  # fmt: skip
    chat = SpanData(
        TRACE, CHAT, RUN, "chat qwen3-32b", semconv.OPERATION_CHAT, T0 + SECOND, T0 + 5 * SECOND, "ERROR",
        model="qwen3-32b", stage="booking",
        violations=(
            ViolationData("too_short", "contract_violation", "12 chars < min_chars 200"),
            ViolationData("missing_required", "contract_violation", "pattern 'verdict' not found"),
        ),
    )  # fmt: skip
    tool = SpanData(
        TRACE, TOOL, RUN, "execute_tool book", semconv.OPERATION_EXECUTE_TOOL, T0 + 6 * SECOND,
        T0 + 7 * SECOND, "UNSET", tool_name="book", tool_call_id="c1",
    )  # fmt: skip
    books = LedgerData(
        RUN,
        "booker",
        balanced=balanced,
        protocol_ok=protocol_ok,
        discrepancies=(Discrepancy("out_of_order_log", "c1", "log_action for c1 came before the call"),),
        time_unix_nano=T0 + 10 * SECOND,
    )
    return TraceData(TRACE, [run, chat, tool], {RUN: books})


def _summary(records: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [
        (r["at"], r["stage"], r["failure_class"], r["violation_types"], r["duration_ms"], r["model"])
        for r in records
    ]


CHAT_RECORD = (
    "2026-05-01T09:30:05.000000Z",  # when the call ended: when its failure was known
    "booking",
    "contract_violation",
    ["missing_required", "too_short"],
    4000.0,
    "qwen3-32b",
)
LEDGER_RECORD = (
    "2026-05-01T09:30:10.000000Z",  # when the run ended
    "booking",  # the stage of the calls below the run
    "ledger_discrepancy",
    ["out_of_order_log"],
    10000.0,
    "qwen3-32b",
)


def test_a_run_whose_books_balance_but_whose_log_protocol_broke_is_exported() -> None:
    records = list(failure_records(_trace(balanced=True, protocol_ok=False)))
    assert _summary(records) == [CHAT_RECORD, LEDGER_RECORD]
    assert records[1]["detail"] == "out_of_order_log c1: log_action for c1 came before the call"
    assert records[1]["source"] == "task_execution"


def test_a_run_whose_books_balance_and_whose_protocol_held_is_no_failure() -> None:
    assert _summary(list(failure_records(_trace(balanced=True, protocol_ok=True)))) == [CHAT_RECORD]


def test_an_unbalanced_run_is_exported() -> None:
    assert _summary(list(failure_records(_trace(balanced=False, protocol_ok=True)))) == [
        CHAT_RECORD,
        LEDGER_RECORD,
    ]


@pytest.mark.parametrize(
    ("types", "expected"),
    [
        # Any of the types asked for keeps a record: one type each.
        (("too_short", "out_of_order_log"), [CHAT_RECORD, LEDGER_RECORD]),
        # The chat record has one of the two, the ledger record the other... or none.
        (("missing_required", "refusal"), [CHAT_RECORD]),
        (("refusal", "out_of_order_log"), [LEDGER_RECORD]),
        (("refusal", "timeout"), []),
        # Both of the chat record's types: kept once.
        (("too_short", "missing_required"), [CHAT_RECORD]),
    ],
)
def test_types_asked_for_keep_a_record_with_any_of_them(
    types: tuple[str, ...], expected: list[tuple[object, ...]]
) -> None:
    keep = FailureFilter(types=frozenset(types))
    assert _summary(list(failure_records(_trace(balanced=True, protocol_ok=False), keep))) == expected


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        # The chat call started at 1 s and ended at 5 s: it is dated 5 s.
        (3, None, [CHAT_RECORD, LEDGER_RECORD]),
        (None, 3, []),
        (5, 6, [CHAT_RECORD]),
        (4, 5, []),
        (6, None, [LEDGER_RECORD]),
        (None, 10, [CHAT_RECORD]),
    ],
)
def test_a_failure_is_dated_by_the_end_of_its_span(
    since: int | None, until: int | None, expected: list[tuple[object, ...]]
) -> None:
    keep = FailureFilter(
        since=None if since is None else T0 + since * SECOND,
        until=None if until is None else T0 + until * SECOND,
    )
    assert _summary(list(failure_records(_trace(balanced=False, protocol_ok=False), keep))) == expected
