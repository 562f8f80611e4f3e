"""Reading the collector file exporter's OTLP JSON: values, ids, traces across lines, bounded memory."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tallyspan import semconv
from tallyspan._datasets._otlp_file import OTLPFileReader, attributes_of

TRACE = "5b8efff798038103d269b633813fc60c"


def _span(span_id: str, parent: str | None, name: str, trace: str = TRACE, **extra: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001500000000",
        "status": {},
        **extra,
    }
    if parent is not None:
        span["parentSpanId"] = parent
    return span


def _line(*spans: dict[str, Any]) -> str:
    request = {
        "resourceSpans": [
            {"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": list(spans)}]}
        ]
    }
    return json.dumps(request) + "\n"


def test_attribute_values_of_every_kind() -> None:
    values = attributes_of(
        [
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "i", "value": {"intValue": "42"}},
            {"key": "d", "value": {"doubleValue": 1.5}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "p"}, {"stringValue": "q"}]}}},
            {"key": "e", "value": {}},
        ]
    )
    assert values == {"s": "x", "i": 42, "d": 1.5, "b": True, "a": ("p", "q"), "e": None}


def test_a_trace_spread_over_lines_is_one_trace_with_its_verdicts_and_books(tmp_path: Path) -> None:
    violation = {
        "name": semconv.EVENT_VIOLATION,
        "timeUnixNano": "1700000001500000000",
        "attributes": [
            {"key": semconv.VIOLATION_TYPE, "value": {"stringValue": "too_short"}},
            {"key": semconv.VIOLATION_FAILURE_CLASS, "value": {"stringValue": "contract_violation"}},
            {"key": semconv.VIOLATION_DETAIL, "value": {"stringValue": "3 chars < min_chars 10"}},
        ],
    }
    chat = _span(
        "00f067aa0ba902b7",
        "1111111111111111",
        "chat m",
        attributes=[
            {"key": semconv.GEN_AI_OPERATION_NAME, "value": {"stringValue": "chat"}},
            {"key": semconv.STAGE, "value": {"stringValue": "report"}},
        ],
        events=[violation],
        status={"code": 2, "message": "tallyspan: too_short"},
    )
    run = _span(
        "1111111111111111",
        None,
        "invoke_agent a",
        attributes=[
            {"key": semconv.GEN_AI_OPERATION_NAME, "value": {"stringValue": "invoke_agent"}},
            {"key": semconv.LEDGER_BALANCED, "value": {"boolValue": False}},
            {"key": semconv.LEDGER_PROTOCOL_OK, "value": {"boolValue": True}},
        ],
        events=[
            {
                "name": semconv.EVENT_LEDGER_DISCREPANCY,
                "attributes": [
                    {"key": semconv.LEDGER_DISCREPANCY_TYPE, "value": {"stringValue": "ledger_missing"}},
                    {"key": semconv.LEDGER_DETAIL, "value": {"stringValue": "1 calls, no log"}},
                ],
            }
        ],
    )
    other = _span("2222222222222222", None, "chat lone", trace="a" * 32)
    path = tmp_path / "traces.json"
    path.write_text(_line(chat) + "\n" + "not json\n" + _line(other, run), encoding="utf-8")
    reader = OTLPFileReader(path)
    traces = list(reader)
    assert [t.trace_id for t in traces] == ["a" * 32, TRACE]
    trace = traces[1]
    spans = {s.name: s for s in trace.spans}
    assert spans["chat m"].stage == "report"
    assert spans["chat m"].status_code == "ERROR"
    assert spans["chat m"].duration_ns == 1_500_000_000
    assert [v.type for v in spans["chat m"].violations] == ["too_short"]
    assert spans["invoke_agent a"].is_run
    assert not spans["chat m"].is_run
    books = trace.ledgers["1111111111111111"]
    assert books.balanced is False
    assert [d.type for d in books.discrepancies] == ["ledger_missing"]
    assert reader.stats.bad_lines == 1
    assert reader.stats.spans == 3


def test_memory_stays_bounded_when_roots_never_come(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "traces.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for n in range(50):  # traces whose root is in another file: never complete here
            trace = f"{n + 1:032x}"
            out.write(
                _line(*(_span(f"{n * 10 + i + 1:016x}", "f" * 16, "chat m", trace=trace) for i in range(4)))
            )
    reader = OTLPFileReader(path, max_buffered_spans=10)
    with caplog.at_level(logging.WARNING):
        sizes = [len(trace.spans) for trace in reader]
    assert sizes == [4] * 50
    assert reader.stats.evicted_traces == 48  # at most 10 spans held: all but the last two left early
    assert "exported before all their spans were read" in caplog.text


def test_an_unreadable_file_is_bad_input(tmp_path: Path) -> None:
    from tallyspan import ConfigError

    with pytest.raises(ConfigError, match="cannot read the OTLP JSON file"):
        list(OTLPFileReader(tmp_path / "missing.json"))
