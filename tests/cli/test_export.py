"""``tallyspan export``: a workload with known failures exports exactly the expected records.

The workload is the demo's (every scripted failure: seven failing reports, one unbalanced run) plus a
stage whose model calls fail: a 500 from the inference server (process_error) and a call the client
gives up on (timeout). It runs fully instrumented, into the store and, through OTLP/HTTP, into a
collector stand-in that writes the collector file exporter's format (one ExportTraceServiceRequest as
OTLP/JSON per line). Both sources must export the same records.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from click.testing import CliRunner, Result
from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry import context
from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from tests.cli.conftest import Recorded
from tests.cli.test_ledger_command import log_action, search
from tests.conftest import LocalReceiver
from tqdm import tqdm

import tallyspan
from tallyspan._datasets import schema_file
from tallyspan._datasets._failure_logs import CARD_MARKER
from tallyspan._engine._taxonomy import FailureClass
from tallyspan._store._store_queries import count_traces, open_store
from tallyspan.cli import main
from tallyspan.cli.demo import load_script, run_demo
from tallyspan.cli.export import ExportResult, export, format_result, parse_when
from tallyspan.testing import OpenAICompatibleServer, ScriptedReply

SCRIPT = load_script()
FAILING_STAGE = "triage"


class CollectorFile(LocalReceiver):
    """An OTLP/HTTP receiver that writes what it receives as the collector's file exporter does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(self._receive, "application/x-protobuf")

    def _receive(self, path: str, body: bytes) -> tuple[int, bytes]:
        if path != "/v1/traces":
            return 200, b""  # ledger logs: not part of a trace file
        request = ExportTraceServiceRequest.FromString(body)
        document = json_format.MessageToDict(request, use_integers_for_enums=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(_hex_ids(document)) + "\n")
        return 200, ExportTraceServiceResponse().SerializeToString()


def _hex_ids(node: Any) -> Any:
    """OTLP/JSON spells trace and span ids in hex where protobuf's JSON mapping uses base64."""
    if isinstance(node, dict):
        return {
            key: base64.b64decode(value).hex()
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str)
            else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node


def _failing_calls(db_path: Path) -> None:
    """Two model calls of the ``triage`` stage that fail: a server error and a client timeout."""
    provider = TracerProvider()
    contracts = {"contracts": {FAILING_STAGE: {"deadline_s": 30}}}
    active = tallyspan.instrument(
        contracts, tracer_provider=provider, store=db_path, instrumentors=["tallyspan_openai"]
    )
    try:
        replies = [ScriptedReply(status=500), ScriptedReply(text="late", delay_s=1.0)]
        with (
            OpenAICompatibleServer(replies=replies) as server,
            openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.2) as client,
        ):
            for _ in replies:
                with tallyspan.stage(FAILING_STAGE), pytest.raises(openai.APIError):
                    client.chat.completions.create(
                        model="qwen3-8b", messages=[{"role": "user", "content": "?"}]
                    )
        assert active.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()


@dataclass(frozen=True)
class Workload:
    db: Path
    otlp_file: Path


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    """The workload recorded once for the module, into a store and an OTLP JSON file."""
    folder = tmp_path_factory.mktemp("workload")
    collector = CollectorFile(folder / "traces.jsonl")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        try:
            run_demo(folder / "tallyspan.db")
            _failing_calls(folder / "tallyspan.db")
        finally:
            collector.close()
    return Workload(folder / "tallyspan.db", folder / "traces.jsonl")


def _export(workload: Workload, out: Path, *options: str, source: str = "store") -> list[dict[str, Any]]:
    arguments = ["--db", str(workload.db), "export", *options, str(out)]
    if source == "otlp":
        arguments += ["--otlp-file", str(workload.otlp_file)]
    result = CliRunner().invoke(main, arguments, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _expected_failure_logs() -> Counter[tuple[str, str | None, str, tuple[str, ...]]]:
    expected: Counter[tuple[str, str | None, str, tuple[str, ...]]] = Counter()
    for run in SCRIPT["runs"]:
        if run["expected_violations"]:
            types = tuple(sorted(run["expected_violations"]))
            language = {"not_japanese", "chinese_in_japanese"} & set(types)
            worst = "contract_violation" if set(types) - language or not language else "language_corruption"
            expected[("task_execution", SCRIPT["stage"], worst, types)] += 1
        if run.get("expected_ledger"):
            ledger = tuple(sorted(run["expected_ledger"]))
            expected[("task_execution", SCRIPT["stage"], "ledger_discrepancy", ledger)] += 1
    expected[("local_inference", FAILING_STAGE, "process_error", ("process_error",))] += 1
    expected[("local_inference", FAILING_STAGE, "timeout", ("timeout",))] += 1
    return expected


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_file(name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("source", ["store", "otlp"])
def test_failure_logs_are_exactly_the_workloads_failures(
    workload: Workload, tmp_path: Path, source: str
) -> None:
    records = _export(workload, tmp_path / "failures.jsonl", "--format", "failure-logs", source=source)
    found = Counter(
        (r["source"], r["stage"], r["failure_class"], tuple(r["violation_types"])) for r in records
    )
    assert found == _expected_failure_logs()
    validator = _validator("failure-log")
    for record in records:
        validator.validate(record)
        assert list(record) == [
            "source", "at", "stage", "failure_class", "violations", "violation_types", "detail",
            "duration_sec", "duration_ms", "model",
        ]  # fmt: skip
        assert record["duration_ms"] == pytest.approx(record["duration_sec"] * 1000, abs=0.01)
    models = {r["model"] for r in records}
    assert models == {SCRIPT["model"], "qwen3-8b"}


def test_the_store_and_the_otlp_file_export_the_same_records(workload: Workload, tmp_path: Path) -> None:
    for kind in ("failure-logs", "diagnosis"):
        from_store = _export(workload, tmp_path / f"{kind}-store.jsonl", "--format", kind)
        from_file = _export(workload, tmp_path / f"{kind}-otlp.jsonl", "--format", kind, source="otlp")
        assert from_file == from_store


def test_no_record_quotes_an_output_with_content_off(workload: Workload, tmp_path: Path) -> None:
    texts = [run["report"] for run in SCRIPT["runs"]] + [SCRIPT["ready_reply"], "late"]
    for kind in ("failure-logs", "diagnosis"):
        records = _export(workload, tmp_path / f"{kind}.jsonl", "--format", kind)
        raw = json.dumps(records, ensure_ascii=False)
        for text in texts:
            for line in (line.strip() for line in text.splitlines()):
                if len(line) >= 12:  # a line of the output long enough to be a quote, not a word
                    assert line not in raw, (kind, line)


def _card_table(card: str, heading: str) -> dict[str, int]:
    section = card.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return {name: int(n) for name, n in re.findall(r"^\| `([^`]+)` \| (\d+) \|$", section, re.MULTILINE)}


def test_the_dataset_card_counts_what_was_exported(workload: Workload, tmp_path: Path) -> None:
    records = _export(workload, tmp_path / "failures.jsonl", "--format", "failure-logs")
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n")
    assert f"{len(records)} failures recorded" in card
    assert _card_table(card, "Failures per class") == Counter(r["failure_class"] for r in records)
    assert _card_table(card, "Failures per type") == Counter(t for r in records for t in r["violation_types"])
    assert _card_table(card, "Models") == Counter(r["model"] for r in records)
    assert _card_table(card, "Stages") == Counter(r["stage"] for r in records)
    times = sorted(r["at"] for r in records)
    assert f"Time window (UTC): {times[0]} to {times[-1]}" in card
    assert "## Limitations" in card


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--stage", FAILING_STAGE), {"process_error", "timeout"}),
        (("--class", "timeout"), {"timeout"}),
        (("--class", "timeout", "--class", "process_error"), {"process_error", "timeout"}),
        (("--type", "refusal"), {"contract_violation"}),
        (("--type", "unlogged_call"), {"ledger_discrepancy"}),
        (("--since", "2999-01-01T00:00Z"), set()),
        (("--until", "2000-01-01"), set()),
        (
            ("--since", "1d"),
            {"contract_violation", "language_corruption", "ledger_discrepancy", "process_error", "timeout"},
        ),
    ],
)
def test_filters_keep_only_the_records_asked_for(
    workload: Workload, tmp_path: Path, options: tuple[str, ...], expected: set[str]
) -> None:
    records = _export(workload, tmp_path / "failures.jsonl", "--format", "failure-logs", *options)
    assert {r["failure_class"] for r in records} == expected
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert f"{len(records)} failures recorded" in card
    if options[0] != "--since" or options[1] != "1d":
        assert "- Filters: none" not in card


def test_two_types_keep_the_records_with_either_of_them(workload: Workload, tmp_path: Path) -> None:
    """The workload has one process_error and one timeout, each alone on its record: asked for both types,
    both records come out (a filter meaning "all of the types" keeps neither)."""
    records = _export(
        workload, tmp_path / "failures.jsonl", "--format", "failure-logs",
        "--type", "process_error", "--type", "timeout",
    )  # fmt: skip
    assert sorted((r["stage"], r["failure_class"], r["violation_types"]) for r in records) == [
        (FAILING_STAGE, "process_error", ["process_error"]),
        (FAILING_STAGE, "timeout", ["timeout"]),
    ]
    diagnosis = _export(
        workload, tmp_path / "diagnosis.jsonl", "--format", "diagnosis",
        "--type", "process_error", "--type", "timeout",
    )  # fmt: skip
    assert sorted(r["diagnosis"]["failure_class"] for r in diagnosis) == ["process_error", "timeout"]


def test_an_unknown_type_or_class_is_bad_input(workload: Workload, tmp_path: Path) -> None:
    for option in ("--type", "--class"):
        result = CliRunner().invoke(
            main,
            [
                "--db",
                str(workload.db),
                "export",
                "--format",
                "failure-logs",
                option,
                "nope",
                str(tmp_path / "o"),
            ],
        )
        assert result.exit_code == 2
        assert "unknown" in result.output
        assert "nope" in result.output


def test_a_readme_not_written_by_the_export_is_never_overwritten(workload: Workload, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# my project\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["--db", str(workload.db), "export", "--format", "failure-logs", str(tmp_path / "f.jsonl")]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {tmp_path / 'README.md'} exists and was not written by tallyspan export: not overwriting it "
        "(choose another folder for OUT, or --card PATH)\n"
    )
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "# my project\n"
    (tmp_path / "README.md").write_bytes(
        "# プロジェクト\n".encode("shift_jis")
    )  # not UTF-8: refused all the same
    result = CliRunner().invoke(
        main, ["--db", str(workload.db), "export", "--format", "failure-logs", str(tmp_path / "f.jsonl")]
    )
    assert result.exit_code == 2
    assert "not overwriting" in result.output
    assert not (tmp_path / "f.jsonl").exists()
    records = _export(
        workload, tmp_path / "f.jsonl", "--format", "failure-logs", "--card", str(tmp_path / "CARD.md")
    )
    assert records
    assert (tmp_path / "CARD.md").is_file()


def test_diagnosis_names_the_first_failing_step_of_each_failed_run(
    workload: Workload, tmp_path: Path
) -> None:
    contracts = Path(tallyspan.__file__).parent / "_demo_data" / "contracts.yaml"
    records = _export(
        workload, tmp_path / "runs.jsonl", "--format", "diagnosis", "--contracts", str(contracts)
    )
    validator = _validator("diagnosis")
    for record in records:
        validator.validate(record)
    demo = [r for r in records if r["run"]["name"] == SCRIPT["agent"]]
    failing_runs = [run for run in SCRIPT["runs"] if run["expected_violations"] or run.get("expected_ledger")]
    assert len(demo) == len(failing_runs)
    for record, run in zip(demo, failing_runs, strict=True):
        diagnosis = record["diagnosis"]
        step = record["steps"][diagnosis["step"]]
        assert diagnosis["agent"] == SCRIPT["agent"]
        assert diagnosis["span_id"] == step["span_id"]
        if run.get("expected_ledger"):
            # the unlogged call comes before the report: the tool call is the first failing step
            unlogged = next(call for call in run["tool_calls"] if not call["logged"])
            assert step["kind"] == "tool_call"
            assert step["tool_call_id"] == unlogged["call_id"]
            assert diagnosis["failure_class"] == "ledger_discrepancy"
            assert "log_action" in diagnosis["correction"]
        else:
            assert step["stage"] == SCRIPT["stage"]
            assert step == record["steps"][-1]
            assert set(step["violation_types"]) == set(run["expected_violations"])
        evidence_types = Counter(e["type"] for e in diagnosis["evidence"] if e["kind"] != "error")
        assert evidence_types == Counter(run["expected_violations"] + run.get("expected_ledger", []))
        if "missing_required" in run["expected_violations"]:
            hint = "the deliverable must contain verdict_line: a line matching 判定[:：]"
            assert any(c.startswith(hint) for c in diagnosis["corrections"])
    # the two failed model calls of the other workload are runs of their own (lone root spans)
    lone = [r for r in records if r["run"]["name"] != SCRIPT["agent"]]
    assert sorted(r["diagnosis"]["failure_class"] for r in lone) == ["process_error", "timeout"]
    assert all(r["diagnosis"]["step"] == 0 and len(r["steps"]) == 1 for r in lone)


def test_export_without_a_store_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--db", str(tmp_path / "none.db"), "export", "--format", "diagnosis", str(tmp_path / "o.jsonl")],
    )
    assert result.exit_code == 1
    assert "No tallyspan store found" in result.output


def test_export_json_summary(workload: Workload, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--db", str(workload.db), "export", "--format", "failure-logs", "--json", str(tmp_path / "f.jsonl")],
        catch_exceptions=False,
    )
    document = json.loads(result.output)
    assert document["command"] == "export"
    data = document["data"]
    assert data["records"] == sum(_expected_failure_logs().values())
    assert data["card"] == str(tmp_path / "README.md")


def test_an_otlp_file_export_shows_its_progress_in_bytes_and_says_what_it_skipped(
    workload: Workload, tmp_path: Path
) -> None:
    damaged = tmp_path / "traces.jsonl"
    damaged.write_text(workload.otlp_file.read_text(encoding="utf-8") + "not json\n", encoding="utf-8")
    packed = tmp_path / "traces.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as out:
        out.write(workload.otlp_file.read_text(encoding="utf-8"))

    def export(source: Path) -> Result:
        options = ["--format", "diagnosis", "--progress", "--otlp-file", str(source)]
        return CliRunner().invoke(
            main,
            ["--db", str(tmp_path / "none.db"), "export", *options, str(tmp_path / "out.jsonl")],
            catch_exceptions=False,
        )

    plain = export(damaged)
    assert plain.exit_code == 0, plain.output
    # The bar counts the file's bytes; a gzip file's size is not what is read, so it has no total.
    size = tqdm.format_sizeof(damaged.stat().st_size)
    assert re.search(
        rf"export diagnosis:   0%\|\s+\| 0\.00/{re.escape(size)} \[00:00<\?, \?B/s\]", plain.stderr
    )
    lines = plain.stdout.splitlines()
    assert re.fullmatch(
        rf"tallyspan export diagnosis — \d+ records from \d+ traces of the OTLP JSON file {re.escape(str(damaged))}",
        lines[0],
    )
    assert lines[2] == "  1 lines of the file were not JSON and were skipped"
    gzipped = export(packed)
    assert "export diagnosis: 0.00B [00:00, ?B/s]" in gzipped.stderr
    assert gzipped.stdout.splitlines()[2] == "  failure class        records"
    missing = CliRunner().invoke(
        main,
        ["export", "--format", "diagnosis", "--otlp-file", str(tmp_path / "x.jsonl"), str(tmp_path / "o")],
    )
    assert (missing.exit_code, missing.output) == (2, f"Error: no OTLP JSON file at {tmp_path / 'x.jsonl'}\n")


def test_since_and_until_take_an_iso_time_utc_unless_it_says_otherwise_or_an_age(
    tokyo_clock: None,
) -> None:
    nine_utc = 1_777_626_000 * 10**9  # 2026-05-01T09:00Z
    assert parse_when("2026-05-01T09:00Z", "--since") == nine_utc
    assert parse_when(" 2026-05-01t09:00z ", "--since") == nine_utc  # RFC 3339's lower case, as `spans` takes
    assert parse_when("2026-05-01T09:00", "--since") == nine_utc  # no offset: UTC, not the local zone
    assert parse_when("2026-05-01T18:00+09:00", "--until") == nine_utc
    assert parse_when("1970-01-01T00:00Z", "--since") == 0
    before = time.time_ns()
    seven_days_ago = parse_when("7d", "--since")
    after = time.time_ns()
    week = 7 * 86400 * 10**9
    assert before - week - 10**6 <= seven_days_ago <= after - week + 10**6


def test_a_bad_since_is_named_with_what_it_takes(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["export", "--format", "diagnosis", "--until", "soon", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: Invalid value for --until: 'soon' is neither an ISO-8601 time (2026-05-01T09:00Z) nor an age (7d)"
    )


def test_diagnosis_filters_keep_only_the_runs_asked_for(workload: Workload, tmp_path: Path) -> None:
    everything = _export(workload, tmp_path / "all.jsonl", "--format", "diagnosis")
    evidence = [{item["type"] for item in record["diagnosis"]["evidence"]} for record in everything]
    unlogged = _export(workload, tmp_path / "u.jsonl", "--format", "diagnosis", "--type", "unlogged_call")
    assert unlogged == [r for r, types in zip(everything, evidence, strict=True) if "unlogged_call" in types]
    assert 0 < len(unlogged) < len(everything)
    timeouts = _export(workload, tmp_path / "t.jsonl", "--format", "diagnosis", "--class", "timeout")
    assert timeouts == [r for r in everything if r["diagnosis"]["failure_class"] == "timeout"] != []
    assert (
        _export(workload, tmp_path / "f.jsonl", "--format", "diagnosis", "--since", "2999-01-01T00:00Z") == []
    )


def test_a_store_export_counts_traces_into_a_new_folder_and_names_its_source_on_the_card(
    workload: Workload, tmp_path: Path
) -> None:
    out = tmp_path / "new" / "folder" / "failures.jsonl"
    result = CliRunner().invoke(
        main,
        ["--db", str(workload.db), "export", "--format", "failure-logs", "--progress", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    with open_store(workload.db) as db:
        traces = count_traces(db)
    assert f"| 0/{traces} [" in result.stderr
    assert f"the store {workload.db}" in (out.parent / "README.md").read_text(encoding="utf-8")


# --- the summary, and what the filters and the options change ----------------------------------------


def _invoke(*arguments: str) -> Result:
    result = CliRunner().invoke(main, list(arguments), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _rows(output: str) -> dict[str, int]:
    """The summary's table: failure class -> records."""
    body = output.split("  failure class", 1)[1].splitlines()[1:]
    return {name: int(n) for name, n in (line.split() for line in body)}


def test_the_summary_counts_the_traces_records_and_classes_and_names_the_file_and_the_card(
    workload: Workload, tmp_path: Path
) -> None:
    with open_store(workload.db) as db:
        traces = count_traces(db)
    out, card = tmp_path / "failures.jsonl", tmp_path / "README.md"
    logs = _invoke("--db", str(workload.db), "export", "--format", "failure-logs", str(out))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    lines = logs.output.splitlines()
    assert lines[:2] == [
        f"tallyspan export failure-logs — {len(records)} records from {traces} traces of the store {workload.db}",
        f"  written to {out}; dataset card {card}",
    ]
    assert _rows(logs.output) == Counter(r["failure_class"] for r in records)
    assert f"    data_files: {out.name}" in card.read_text(encoding="utf-8").splitlines()

    runs = tmp_path / "runs.jsonl"
    diagnosis = _invoke("--db", str(workload.db), "export", "--format", "diagnosis", str(runs))
    found = [json.loads(line) for line in runs.read_text(encoding="utf-8").splitlines()]
    classes = Counter(r["diagnosis"]["failure_class"] for r in found)
    assert classes["contract_violation"] > 1  # a class counted more than once
    assert diagnosis.output.splitlines()[:2] == [
        f"tallyspan export diagnosis — {len(found)} records from {traces} traces of the store {workload.db}",
        f"  written to {runs}",
    ]
    assert _rows(diagnosis.output) == classes
    summary = json.loads(
        _invoke("--db", str(workload.db), "export", "--format", "diagnosis", "--json", str(runs)).output
    )
    assert summary["data"] == {
        "format": "diagnosis",
        "out": str(runs),
        "source": f"the store {workload.db}",
        "traces": traces,
        "records": len(found),
        "card": None,
        "judged": 0,
        "by_class": dict(classes),
        "skipped_lines": 0,
        "split_traces": 0,
    }


def test_an_otlp_file_export_summary_says_what_it_read(workload: Workload, tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    result = _invoke(
        "export", "--format", "diagnosis", "--json", "--otlp-file", str(workload.otlp_file), str(out)
    )
    data = json.loads(result.output)["data"]
    assert (data["source"], data["out"], data["skipped_lines"], data["split_traces"]) == (
        f"the OTLP JSON file {workload.otlp_file}",
        str(out),
        0,
        0,
    )
    assert data["records"] == len(out.read_text(encoding="utf-8").splitlines())


def test_the_summary_says_how_many_traces_were_split_by_the_memory_bound() -> None:
    result = ExportResult(
        "diagnosis", "runs.jsonl", "the OTLP JSON file t.jsonl", traces=5, records=2, judged=2,
        by_class={"timeout": 2}, skipped_lines=3, split_traces=4,
    )  # fmt: skip
    assert format_result(result).splitlines() == [
        "tallyspan export diagnosis — 2 records from 5 traces of the OTLP JSON file t.jsonl",
        "  written to runs.jsonl",
        "  2 runs judged",
        "  3 lines of the file were not JSON and were skipped",
        "  4 traces were exported before all their spans were read",
        "  failure class  records",
        "  timeout              2",
    ]


def test_records_keep_their_text_readable_and_failure_logs_show_the_contracts_patterns(
    workload: Workload, tmp_path: Path
) -> None:
    contracts = Path(tallyspan.__file__).parent / "_demo_data" / "contracts.yaml"
    for kind in ("failure-logs", "diagnosis"):
        out = tmp_path / f"{kind}.jsonl"
        _invoke("--db", str(workload.db), "export", "--format", kind, "--contracts", str(contracts), str(out))
        assert "判定[:：]" in out.read_text(encoding="utf-8")  # as written, not as \\u escapes
    plain = tmp_path / "plain.jsonl"
    _invoke("--db", str(workload.db), "export", "--format", "failure-logs", str(plain))
    assert "判定[:：]" not in plain.read_text(encoding="utf-8")


def test_a_time_window_counts_and_exports_only_the_traces_inside_it(
    recorded: Recorded, tmp_path: Path
) -> None:
    """``reporter`` was recorded three days ago, the three other traces now."""
    out = tmp_path / "failures.jsonl"
    for window, traces in ((("--since", "1d"), 3), (("--until", "1d"), 1)):
        result = CliRunner().invoke(
            main,
            ["--db", str(recorded.path), "export", "--format", "failure-logs", *window, "--progress", "--json",
             str(out)],
            catch_exceptions=False,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["data"]["traces"] == traces, window
        assert f"| 0/{traces} [" in result.stderr, window
    reporter = _invoke(
        "--db", str(recorded.path), "export", "--format", "diagnosis", "--until", "1d", "--json", str(out)
    )
    assert [json.loads(line)["run"]["name"] for line in out.read_text(encoding="utf-8").splitlines()] == [
        "reporter"
    ]
    assert json.loads(reporter.output)["data"]["records"] == 1
    recent = _invoke("--db", str(recorded.path), "export", "--format", "diagnosis", "--since", "1d", str(out))
    names = sorted(json.loads(line)["run"]["name"] for line in out.read_text(encoding="utf-8").splitlines())
    assert "reporter" not in names
    assert names
    assert "from 3 traces" in recent.output


def test_diagnosis_keeps_a_run_with_a_step_in_the_stage_asked_for(workload: Workload, tmp_path: Path) -> None:
    everything = _export(workload, tmp_path / "all.jsonl", "--format", "diagnosis")
    triage = _export(workload, tmp_path / "t.jsonl", "--format", "diagnosis", "--stage", FAILING_STAGE)
    assert triage == [r for r in everything if FAILING_STAGE in {step["stage"] for step in r["steps"]}]
    assert sorted(r["diagnosis"]["failure_class"] for r in triage) == ["process_error", "timeout"]
    recent = _export(workload, tmp_path / "r.jsonl", "--format", "diagnosis", "--since", "1d")
    assert recent == everything


def test_the_export_function_shows_no_bar_unless_asked_and_the_cli_bar_leaves_no_line(
    workload: Workload, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.jsonl"
    result = export("diagnosis", out, db_path=workload.db)
    assert result.records == len(out.read_text(encoding="utf-8").splitlines())
    assert capsys.readouterr().err == ""
    shown = CliRunner().invoke(
        main, ["--db", str(workload.db), "export", "--format", "diagnosis", "--progress", str(out)]
    )
    assert shown.exit_code == 0
    assert "| 0/" in shown.stderr
    assert "100%" not in shown.stderr  # the bar is cleared when the export ends
    assert shown.stderr.endswith("\r")


def test_an_unknown_type_or_class_is_named_with_the_known_ones(workload: Workload, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--db", str(workload.db), "export", "--format", "failure-logs", "--class", "zzz", "--class", "nope",
         "--class", "timeout", str(tmp_path / "o")],
    )  # fmt: skip
    assert result.exit_code == 2
    known = ", ".join(sorted(member.value for member in FailureClass))
    assert result.output.splitlines()[-1] == f"Error: unknown failure class nope, zzz; known: {known}"


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Through the real chain: an agent called twice over HTTP in one trace (two runs under a remote
    parent), the first run leaving its call unlogged, the second logging a call nobody made; then a run
    that raises."""
    path = tmp_path_factory.mktemp("runs") / "tallyspan.db"
    provider = TracerProvider()
    active = tallyspan.instrument(tracer_provider=provider, store=path, instrumentors=())
    caller = SpanContext(0xAB << 120, 0xCD, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    try:
        token = context.attach(otel_trace.set_span_in_context(NonRecordingSpan(caller)))
        try:
            with tallyspan.run("forgetful"):
                search("a", tool_call_id="c1")
            with tallyspan.run("boastful"):
                log_action("c9", "search", "succeeded", tool_call_id="L9")
        finally:
            context.detach(token)
        with pytest.raises(RuntimeError), tallyspan.run("crashy"):
            raise RuntimeError("boom")
        assert active.force_flush()
    finally:
        tallyspan.uninstrument()
        provider.shutdown()
    return path


def test_diagnosis_filters_each_run_of_a_trace_and_counts_a_run_without_a_class(
    runs_store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "runs.jsonl"
    result = _invoke("--db", str(runs_store), "export", "--format", "diagnosis", str(out))
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["run"]["name"], r["diagnosis"]["failure_class"]) for r in records] == [
        ("forgetful", "ledger_discrepancy"),
        ("boastful", "ledger_discrepancy"),
        ("crashy", None),
    ]
    assert result.output.splitlines()[0].endswith("3 records from 2 traces of the store " + str(runs_store))
    assert _rows(result.output) == {"(none)": 1, "ledger_discrepancy": 2}
    # the first run of the request is left out, the second one still exported
    _invoke("--db", str(runs_store), "export", "--format", "diagnosis", "--type", "phantom_log", str(out))
    assert [json.loads(line)["run"]["name"] for line in out.read_text(encoding="utf-8").splitlines()] == [
        "boastful"
    ]


def test_a_run_without_a_start_time_is_exported_and_left_out_by_a_time_window(tmp_path: Path) -> None:
    """A file from another writer: a failed model call whose span has no start time."""
    span = {
        "traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat m", "endTimeUnixNano": "1000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                       {"key": "error.type", "value": {"stringValue": "TimeoutError"}}],
        "status": {"code": 2},
    }  # fmt: skip
    source = tmp_path / "traces.jsonl"
    source.write_text(
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}) + "\n", encoding="utf-8"
    )
    out = tmp_path / "runs.jsonl"
    _invoke("export", "--format", "diagnosis", "--otlp-file", str(source), str(out))
    [record] = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert record["run"]["start"] is None
    _invoke(
        "export",
        "--format",
        "diagnosis",
        "--since",
        "1970-01-01T00:00Z",
        "--otlp-file",
        str(source),
        str(out),
    )
    assert out.read_text(encoding="utf-8") == ""


@pytest.mark.usefixtures("ascii_locale")
def test_an_export_writes_its_records_and_card_in_utf8_whatever_the_locale(
    workload: Workload, tmp_path: Path
) -> None:
    store = tmp_path / "週報" / "tallyspan.db"  # the card names its source
    store.parent.mkdir()
    shutil.copy(workload.db, store)
    contracts = Path(tallyspan.__file__).parent / "_demo_data" / "contracts.yaml"
    out = tmp_path / "failures.jsonl"
    _invoke("--db", str(store), "export", "--format", "failure-logs", "--contracts", str(contracts), str(out))
    assert "判定[:：]" in out.read_text(encoding="utf-8")
    assert f"the store {store}" in (tmp_path / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def every_update_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm draws every update of a bar (by default, at most one each 0.1 s): the test sees each count."""
    init = tqdm.__init__

    def drawing_each_update(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{"mininterval": 0, "miniters": 1, **kwargs})

    monkeypatch.setattr(tqdm, "__init__", drawing_each_update)


@pytest.mark.usefixtures("every_update_drawn")
def test_the_bar_of_a_store_export_counts_each_trace_once(workload: Workload, tmp_path: Path) -> None:
    result = _invoke(
        "--db",
        str(workload.db),
        "export",
        "--format",
        "diagnosis",
        "--progress",
        str(tmp_path / "runs.jsonl"),
    )
    with open_store(workload.db) as db:
        traces = count_traces(db)
    assert f"| 0/{traces} [00:00<?, ?trace/s]" in result.stderr
    assert [int(n) for n in re.findall(rf"\| (\d+)/{traces} \[", result.stderr)] == list(range(traces + 1))


@pytest.mark.usefixtures("every_update_drawn")
def test_the_bar_of_a_file_export_counts_the_bytes_up_to_the_files_size(
    workload: Workload, tmp_path: Path
) -> None:
    result = _invoke(
        "--db", str(tmp_path / "none.db"), "export", "--format", "diagnosis", "--progress",
        "--otlp-file", str(workload.otlp_file), str(tmp_path / "runs.jsonl"),
    )  # fmt: skip
    size = tqdm.format_sizeof(workload.otlp_file.stat().st_size)
    shown = re.findall(rf"\| ([^|/ ]+)/{re.escape(size)} \[", result.stderr)
    assert (shown[0], shown[-1]) == ("0.00", size)


@pytest.mark.parametrize("after", ["  ", "\t", "XX"])
def test_a_readme_whose_marker_line_goes_on_after_the_marker_is_not_the_exports(
    workload: Workload, tmp_path: Path, after: str
) -> None:
    """Anything after the marker, even blanks, makes the line another one: the README is left alone."""
    readme = tmp_path / "README.md"
    readme.write_text(f"---\n---\n{CARD_MARKER}{after}\n# my notes\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["--db", str(workload.db), "export", "--format", "failure-logs", str(tmp_path / "f.jsonl")]
    )
    assert result.exit_code == 2
    assert "not overwriting it" in result.output
    assert readme.read_text(encoding="utf-8") == f"---\n---\n{CARD_MARKER}{after}\n# my notes\n"
    readme.write_text(f"---\n---\n{CARD_MARKER}\n# my notes\n", encoding="utf-8")  # the marker alone: ours
    _invoke("--db", str(workload.db), "export", "--format", "failure-logs", str(tmp_path / "f.jsonl"))
    assert readme.read_text(encoding="utf-8").count(CARD_MARKER) == 1
    assert "# my notes" not in readme.read_text(encoding="utf-8")
