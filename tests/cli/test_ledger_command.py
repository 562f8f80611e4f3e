"""``tallyspan ledger [--run ID] [--json]``: the books written by a real instrumented run, read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from tests.cli.conftest import Recorded

import tallyspan
from tallyspan._store._store_queries import ledger_books, open_store
from tallyspan._store._store_schema import connect
from tallyspan.cli import main
from tallyspan.cli.ledger import LedgerLine, LedgerSide, command, load_books


def _invoke(db_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--db", str(db_path), "ledger", *args], catch_exceptions=False)
    return result.exit_code, result.output


@tallyspan.tool
def search(query: str, tool_call_id: str) -> str:
    return query


@tallyspan.tool
def log_action(
    call_id: str, tool_name: str, claimed_outcome: str, tool_call_id: str, summary: str = ""
) -> str:
    """The agent's log tool: each call is a claim on the books."""
    return "logged"


@pytest.fixture
def books(tracer_provider: TracerProvider, db_path: Path) -> dict[str, str]:
    """Two runs recorded through the real chain into the store; returns run name -> run span id."""
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())

    @tallyspan.tool
    def book(flight: str, tool_call_id: str) -> str:
        raise tallyspan.Rejected("no seats")

    ids = {}
    with tallyspan.run("tidy") as span:
        search("a", tool_call_id="c1")
        log_action("c1", "search", "succeeded", tool_call_id="L1")
    ids["tidy"] = format(span.get_span_context().span_id, "016x")
    with tallyspan.run("sloppy") as span:
        search("b", tool_call_id="c2")
        log_action("c2", "search", "succeeded", tool_call_id="L2")
        with pytest.raises(tallyspan.Rejected):
            book("HAT001", tool_call_id="c3")
        log_action("c9", "issue_refund", "succeeded", tool_call_id="L3", summary=REFUND_SUMMARY)
    ids["sloppy"] = format(span.get_span_context().span_id, "016x")
    instrumentation.force_flush()
    tallyspan.uninstrument()
    return ids


#: The agent's free text for a refund it never made: content, kept only with capture on.
REFUND_SUMMARY = "Refunded 12,000 yen to Tanaka Hanako"


def test_ledger_shows_both_columns_the_balance_and_the_discrepancies(
    db_path: Path, books: dict[str, str]
) -> None:
    code, output = _invoke(db_path)
    assert code == 0
    sloppy, tidy = output.split("\n\n")  # the latest run first
    assert tidy.splitlines()[0].startswith(f"run tidy  span {books['tidy']}  trace ")
    assert tidy.splitlines()[1] == "  balanced, protocol ok: 1 observed, 1 claimed"
    assert "no discrepancies" in tidy
    lines = sloppy.splitlines()
    assert lines[1] == "  UNBALANCED, protocol ok: 2 observed, 2 claimed"
    assert lines[2].split() == [
        "observed",
        "call",
        "tool",
        "outcome",
        "|",
        "claimed",
        "call",
        "tool",
        "outcome",
        "summary",
    ]
    assert lines[3].split() == ["c2", "search", "succeeded", "|", "c2", "search", "succeeded", "-"]
    assert lines[4].split() == ["c3", "book", "rejected", "|", "-", "-", "-", "-"]
    # A call never made, as claimed: its call id and tool name are identifiers, kept on the user's own
    # disk with capture off; its summary is content, kept nowhere.
    assert lines[5].split() == ["-", "-", "-", "|", "c9", "issue_refund", "succeeded", "-"]
    assert lines[6].split() == ["discrepancy", "call", "detail"]
    assert lines[7].split() == ["unlogged_refusal", "c3", "book", "rejected,", "not", "logged"]
    assert lines[8] == "  phantom_log       c9    issue_refund claimed succeeded, never called"
    assert len(lines) == 9


def test_without_capture_the_summary_of_a_phantom_log_is_in_no_byte_of_the_store(
    db_path: Path, books: dict[str, str]
) -> None:
    stored = sorted(db_path.parent.glob(db_path.name + "*"))
    assert db_path in stored
    data = b"".join(path.read_bytes() for path in stored)  # the database, its WAL and shared memory
    assert REFUND_SUMMARY.encode() not in data
    assert b"Tanaka" not in data
    assert b"issue_refund" in data  # the search can find what is there


def test_with_capture_the_ledger_shows_a_phantom_log_with_its_summary(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider, store=db_path, instrumentors=(), capture_content=True
    )
    with tallyspan.run("phantom") as span:
        log_action("c9", "issue_refund", "succeeded", tool_call_id="L1", summary=REFUND_SUMMARY)
    instrumentation.force_flush()
    tallyspan.uninstrument()
    code, output = _invoke(db_path)
    assert code == 0
    assert output.splitlines()[1:] == [
        "  UNBALANCED, protocol ok: 0 observed, 1 claimed",
        "  observed call  tool  outcome  |  claimed call  tool          outcome    summary",
        f"  -              -     -        |  c9            issue_refund  succeeded  {REFUND_SUMMARY}",
        "  discrepancy  call  detail",
        "  phantom_log  c9    issue_refund claimed succeeded, never called",
    ]
    assert output.startswith(f"run phantom  span {span.get_span_context().span_id:016x}  trace ")


def test_a_claimed_name_that_is_no_identifier_stays_unobserved_in_the_store(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    """Free text in the tool-name field (spaces, a sentence) is content, not an identifier."""
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())
    with tallyspan.run("wordy"):
        log_action("call 9 for Tanaka", "refund Tanaka Hanako", "succeeded", tool_call_id="L1")
    instrumentation.force_flush()
    tallyspan.uninstrument()
    code, output = _invoke(db_path)
    assert code == 0
    lines = output.splitlines()
    assert lines[3].split() == ["-", "-", "-", "|", "unobserved", "unobserved", "succeeded", "-"]
    assert lines[5].split() == [
        "phantom_log", "unobserved", "unobserved", "claimed", "succeeded,", "never", "called"
    ]  # fmt: skip
    data = b"".join(path.read_bytes() for path in db_path.parent.glob(db_path.name + "*"))
    assert b"Tanaka" not in data


def test_run_option_selects_one_run_by_span_id_prefix(db_path: Path, books: dict[str, str]) -> None:
    code, output = _invoke(db_path, "--run", books["sloppy"][:8])
    assert code == 0
    assert output.startswith("run sloppy")
    assert "run tidy" not in output


def test_run_option_selects_one_run_by_its_trace_id_or_a_prefix_of_it(
    db_path: Path, books: dict[str, str]
) -> None:
    _, everything = _invoke(db_path)
    headers = {
        line.split()[1]: line.split()[5] for line in everything.splitlines() if line.startswith("run ")
    }
    trace_id = headers["sloppy"]
    assert len(trace_id) == 32
    assert trace_id != headers["tidy"]
    for given in (trace_id, trace_id[:10], trace_id.upper()):
        code, output = _invoke(db_path, "--run", given)
        assert code == 0
        assert output.startswith(f"run sloppy  span {books['sloppy']}  trace {trace_id}\n")
        assert "run tidy" not in output


def test_json_is_the_pinned_document(db_path: Path, books: dict[str, str]) -> None:
    code, output = _invoke(db_path, "--run", books["tidy"], "--json")
    assert code == 0
    document = json.loads(output)
    (run,) = document["data"]
    assert document["format_version"] == 1
    assert document["command"] == "ledger"
    assert len(run.pop("trace_id")) == 32
    assert isinstance(run.pop("time_unix_nano"), int)
    assert run == {
        "run_span_id": books["tidy"],
        "run_name": "tidy",
        "balanced": True,
        "protocol_ok": True,
        "discrepancy_types": [],
        "observed_count": 1,
        "claimed_count": 1,
        "discrepancies": [],
        "lines": [
            {
                "observed": {
                    "seq": 0,
                    "call_id": "c1",
                    "tool_name": "search",
                    "outcome": "succeeded",
                    "summary": None,
                },
                "claimed": {
                    "seq": 1,
                    "call_id": "c1",
                    "tool_name": "search",
                    "outcome": "succeeded",
                    "summary": None,
                },
            }
        ],
    }


def test_limit_shows_the_latest_runs(db_path: Path, books: dict[str, str]) -> None:
    code, output = _invoke(db_path, "--limit", "1")
    assert code == 0
    assert output.startswith("run sloppy")


def test_unbalanced_shows_only_the_runs_whose_books_do_not_balance(
    db_path: Path, books: dict[str, str]
) -> None:
    code, output = _invoke(db_path, "--unbalanced", "--json")
    assert code == 0
    assert [run["run_name"] for run in json.loads(output)["data"]] == ["sloppy"]
    code, output = _invoke(db_path, "--unbalanced")
    assert output.startswith(f"run sloppy  span {books['sloppy']}")
    assert "run tidy" not in output


def test_unbalanced_with_a_balanced_run_id_finds_nothing(db_path: Path, books: dict[str, str]) -> None:
    result = CliRunner().invoke(
        main, ["--db", str(db_path), "ledger", "--unbalanced", "--run", books["tidy"]]
    )
    assert result.exit_code == 1
    assert f"No unbalanced run has the id '{books['tidy']}'" in result.output


def test_unbalanced_on_a_store_whose_books_all_balance_says_so(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())
    with tallyspan.run("quiet"):  # a declared run is reconciled even with nothing on its books
        pass
    instrumentation.force_flush()
    tallyspan.uninstrument()
    code, output = _invoke(db_path, "--unbalanced")
    assert (code, output) == (0, "No unbalanced runs found.\n")


def test_runs_are_listed_latest_first_and_unbalanced_ones_alone_on_request(recorded: Recorded) -> None:
    code, output = _invoke(recorded.path, "--json")
    assert code == 0
    assert [run["run_name"] for run in json.loads(output)["data"]] == ["both", "booker", "reporter"]
    code, output = _invoke(recorded.path, "--unbalanced", "--json")
    (booker,) = json.loads(output)["data"]
    assert booker["trace_id"] == recorded.trace_ids["booker"]
    assert booker["balanced"] is False
    assert booker["discrepancy_types"] == ["ledger_missing", "unlogged_call"]
    assert [d["type"] for d in booker["discrepancies"]] == ["unlogged_call", "ledger_missing"]


def test_unknown_run_is_a_clear_error(db_path: Path, books: dict[str, str]) -> None:
    # Not hex: a random run id can never start with it (a hex prefix such as "ffff" sometimes did).
    result = CliRunner().invoke(main, ["--db", str(db_path), "ledger", "--run", "no-such-run"])
    assert result.exit_code == 1
    assert "No reconciled run has the id 'no-such-run'" in result.output


def test_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), "ledger"])
    assert result.exit_code == 1
    assert "No tallyspan store found at" in result.output


def test_empty_store_says_so(db_path: Path) -> None:
    from tallyspan._store._store_schema import connect

    connect(db_path).close()
    code, output = _invoke(db_path)
    assert (code, output) == (0, "No reconciled runs found.\n")


def test_the_command_is_named_ledger() -> None:
    assert command.name == "ledger"
    assert "ledger" in main.commands


def test_id_less_claims_sit_beside_the_earliest_unclaimed_call_of_their_tool() -> None:
    from tallyspan._store._store_queries import ledger_lines

    rows = [
        {
            "side": "observed",
            "seq": 0,
            "call_id": "a",
            "tool_name": "t",
            "outcome": "succeeded",
            "summary": "",
        },
        {"side": "observed", "seq": 1, "call_id": "b", "tool_name": "t", "outcome": "failed", "summary": ""},
        {"side": "claimed", "seq": 2, "call_id": "b", "tool_name": "t", "outcome": "failed", "summary": "x"},
        {
            "side": "claimed",
            "seq": 3,
            "call_id": None,
            "tool_name": "t",
            "outcome": "succeeded",
            "summary": "",
        },
    ]
    lines = ledger_lines(rows)  # type: ignore[arg-type]
    assert lines == [
        LedgerLine(LedgerSide(0, "a", "t", "succeeded", None), LedgerSide(3, None, "t", "succeeded", None)),
        LedgerLine(LedgerSide(1, "b", "t", "failed", None), LedgerSide(2, "b", "t", "failed", "x")),
    ]


# --- a broken protocol, the limit, older writers' rows ----------------------------------------------


@pytest.fixture
def protocol(tracer_provider: TracerProvider, db_path: Path) -> dict[str, str]:
    """Four runs through the real chain: ``tidy``, ``late`` (both calls logged, but after both calls:
    balanced, protocol broken), ``sloppy`` (a call nobody logged) and ``noted`` (a logged summary, kept
    since content is captured). Returns run name -> trace id."""
    instrumentation = tallyspan.instrument(
        tracer_provider=tracer_provider, store=db_path, instrumentors=(), capture_content=True
    )

    traces = {}
    with tallyspan.run("tidy") as span:
        search("a", tool_call_id="t1")
        log_action("t1", "search", "succeeded", tool_call_id="tL1")
    traces["tidy"] = format(span.get_span_context().trace_id, "032x")
    with tallyspan.run("late") as span:
        search("b", tool_call_id="l1")
        search("c", tool_call_id="l2")
        log_action("l1", "search", "succeeded", tool_call_id="lL1")
        log_action("l2", "search", "succeeded", tool_call_id="lL2")
    traces["late"] = format(span.get_span_context().trace_id, "032x")
    with tallyspan.run("sloppy") as span:
        search("d", tool_call_id="s1")
    traces["sloppy"] = format(span.get_span_context().trace_id, "032x")
    with tallyspan.run("noted") as span:
        search("e", tool_call_id="n1")
        log_action("n1", "search", "succeeded", tool_call_id="nL1", summary="looked it up")
    traces["noted"] = format(span.get_span_context().trace_id, "032x")
    instrumentation.force_flush()
    tallyspan.uninstrument()
    return traces


def _runs(db_path: Path, *args: str) -> list[dict[str, Any]]:
    code, output = _invoke(db_path, *args, "--json")
    assert code == 0, output
    runs: list[dict[str, Any]] = json.loads(output)["data"]
    return runs


def test_a_run_logged_out_of_order_balances_but_says_its_protocol_broke(
    db_path: Path, protocol: dict[str, str]
) -> None:
    code, output = _invoke(db_path, "--run", protocol["late"])
    assert code == 0
    lines = output.splitlines()
    assert lines[1] == "  balanced, protocol broken: 2 observed, 2 claimed"
    assert [line.split()[0] for line in lines[6:]] == ["out_of_order_log"]
    _, tidy = _invoke(db_path, "--run", protocol["tidy"])
    assert tidy.splitlines()[1:] == [
        "  balanced, protocol ok: 1 observed, 1 claimed",
        "  observed call  tool    outcome    |  claimed call  tool    outcome    summary",
        "  t1             search  succeeded  |  t1            search  succeeded  -",
        "  no discrepancies",
    ]
    _, noted = _invoke(db_path, "--run", protocol["noted"])
    assert noted.splitlines()[3].endswith("  |  n1            search  succeeded  looked it up")


def test_limit_and_run_choose_the_runs_and_unbalanced_keeps_only_books_that_do_not_balance(
    db_path: Path, protocol: dict[str, str]
) -> None:
    assert [run["run_name"] for run in _runs(db_path)] == ["noted", "sloppy", "late", "tidy"]
    assert [run["run_name"] for run in _runs(db_path, "--limit", "2")] == ["noted", "sloppy"]
    assert [run["run_name"] for run in _runs(db_path, "--run", protocol["tidy"], "--limit", "1")] == ["tidy"]
    # A broken protocol counts as books that do not balance, as the report counts it.
    assert [run["run_name"] for run in _runs(db_path, "--unbalanced")] == ["sloppy", "late"]
    with open_store(db_path) as db:
        assert [run.run_name for run in ledger_books(db)] == ["noted", "sloppy", "late", "tidy"]
    assert [run.run_name for run in load_books(db_path)] == ["noted", "sloppy", "late", "tidy"]
    assert [run.run_name for run in load_books(db_path, limit=1)] == ["noted"]


def test_the_unbalanced_runs_listed_are_the_runs_the_report_counts_with_the_reason_shown(
    db_path: Path, protocol: dict[str, str]
) -> None:
    report = CliRunner().invoke(main, ["--db", str(db_path), "report"], catch_exceptions=False)
    # The ledger section's last line (what tallyspan counted may follow it: GIL hand-overs on a busy host).
    assert "  2 of 4 runs do not balance" in report.output.splitlines()
    code, output = _invoke(db_path, "--unbalanced")
    assert code == 0
    headers = [line for line in output.splitlines() if line.startswith("  ") and " observed, " in line]
    assert headers == [
        "  UNBALANCED, protocol ok: 1 observed, 0 claimed",
        "  balanced, protocol broken: 2 observed, 2 claimed",
    ]
    assert "  out_of_order_log" in output
    assert [run["run_name"] for run in _runs(db_path, "--unbalanced", "--run", protocol["late"])] == ["late"]
    code, output = _invoke(db_path, "--unbalanced", "--run", protocol["tidy"])
    assert code == 1
    assert f"No unbalanced run has the id {protocol['tidy']!r}" in output


def test_every_run_a_prefix_names_is_shown_whatever_the_limit(
    tracer_provider: TracerProvider, db_path: Path
) -> None:
    instrumentation = tallyspan.instrument(tracer_provider=tracer_provider, store=db_path, instrumentors=())
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as request:  # two runs served by one request: one trace
        with tallyspan.run("first"):
            pass
        with tallyspan.run("second"):
            pass
    instrumentation.force_flush()
    tallyspan.uninstrument()
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert [run["run_name"] for run in _runs(db_path, "--run", trace_id, "--limit", "1")] == [
        "second",
        "first",
    ]


def test_wildcards_and_escapes_in_a_run_id_are_taken_literally(
    db_path: Path, protocol: dict[str, str]
) -> None:
    for given in ("%", "_", "\\" + protocol["tidy"][:6]):
        result = CliRunner().invoke(main, ["--db", str(db_path), "ledger", "--run", given])
        assert result.exit_code == 1, given
        assert f"No reconciled run has the id {given!r}" in result.output


def test_a_row_of_an_older_writer_shows_what_it_lacks_as_dashes(db_path: Path) -> None:
    db = connect(db_path)
    with db:
        db.execute(
            "INSERT INTO ledger_reconciliations (trace_id, run_span_id, run_name, balanced, protocol_ok,"
            " discrepancy_types, discrepancies, observed_count, claimed_count, time_unix_nano)"
            " VALUES (?, ?, NULL, 0, 1, ?, ?, NULL, NULL, 1)",
            ("ab" * 16, "cd" * 8, '["unlogged_call"]', '[{"type": "unlogged_call", "call_id": "c7"}]'),
        )
    db.close()
    code, output = _invoke(db_path)
    assert code == 0
    assert output.splitlines() == [
        f"run -  span {'cd' * 8}  trace {'ab' * 16}",
        "  UNBALANCED, protocol ok: - observed, - claimed",
        "  (none)",
        "  discrepancy    call  detail",
        "  unlogged_call  c7",
    ]
    (run,) = _runs(db_path)
    assert run["discrepancies"] == [{"type": "unlogged_call", "call_id": "c7", "detail": ""}]
    assert (run["observed_count"], run["claimed_count"], run["run_name"]) == (None, None, None)


def test_rows_missing_their_balance_or_with_damaged_discrepancies_show_what_they_hold(db_path: Path) -> None:
    """A row without balance (NULL: unknown, not False), one without discrepancies (NULL) and one whose
    discrepancies are JSON but not an array, as an older or foreign writer or a hand edit leaves them."""
    db = connect(db_path)
    with db:
        for n, (balanced, discrepancies) in enumerate(
            [(None, '[{"type": "late_log"}]'), (0, None), (0, "5")]
        ):
            db.execute(
                "INSERT INTO ledger_reconciliations (trace_id, run_span_id, balanced, protocol_ok,"
                " discrepancies, time_unix_nano) VALUES (?, ?, ?, ?, ?, ?)",
                (f"{n}" * 32, f"{n}" * 16, balanced, balanced, discrepancies, n + 1),
            )
    db.close()
    runs = _runs(db_path)
    assert [(run["run_span_id"], run["balanced"], run["protocol_ok"]) for run in runs] == [
        ("2" * 16, False, False),
        ("1" * 16, False, False),
        ("0" * 16, None, None),
    ]
    assert [run["discrepancies"] for run in runs] == [
        [],
        [],
        [{"type": "late_log", "call_id": None, "detail": ""}],
    ]
