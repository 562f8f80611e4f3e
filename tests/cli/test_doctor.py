"""``tallyspan doctor``: what is patched, which contract each stage gets, where spans go, what was lost;
from the installation, the environment, the contracts file and the store alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from tests.cli.conftest import Filled, Recorded

import tallyspan
from tallyspan.cli import main
from tallyspan_exporters import SQLiteSpanExporter


def _doctor(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, [*args[:2], "doctor", *args[2:], "--json"], catch_exceptions=False)
    document: dict[str, Any] = json.loads(result.output)
    assert (document["format_version"], document["command"]) == (1, "doctor")
    return result.exit_code, document["data"]


def test_doctor_json_is_the_pinned_document(recorded: Recorded) -> None:
    code, data = _doctor("--db", str(recorded.path), "--contracts", str(recorded.contracts))
    assert code == 1  # the store recorded a drop
    assert set(data) == {
        "version", "instrumentors", "contracts", "store", "otlp", "capture_content", "service_name", "notes",
        "problems",
    }  # fmt: skip
    ours = next(item for item in data["instrumentors"] if item["name"] == "tallyspan_openai")
    assert ours == {
        "name": "tallyspan_openai",
        "target": "tallyspan_instrumentors.openai:OpenAIInstrumentor",
        "tallyspan": True,
        "requires": ours["requires"],
        "library_installed": True,
        "disabled": False,
        "patched_by": ["tallyspan.instrument()", "opentelemetry-instrument"],
        "problem": None,
    }
    assert ours["requires"][0].startswith("openai")
    official = next(item for item in data["instrumentors"] if item["name"] == "openai")
    assert (official["tallyspan"], official["patched_by"]) == (False, ["opentelemetry-instrument"])
    assert data["contracts"] == {
        "path": str(recorded.contracts),
        "given_by": "--contracts",
        "error": None,
        "contracts": ["triage", "weekly_report"],
        "default": False,
        "match_rules": [],
        "stages": [
            {"stage": "triage", "contract": "triage", "calls": 1, "violating": 1},
            {"stage": "weekly_report", "contract": "weekly_report", "calls": 3, "violating": 1},
        ],
    }
    store = data["store"]
    assert (store["path"], store["exists"], store["error"]) == (str(recorded.path), True, None)
    overview = store["overview"]
    assert set(overview) == {
        "spans", "traces", "runs", "reconciled_runs", "first_span_unix_nano", "last_span_unix_nano", "stages",
        "counters",
    }  # fmt: skip
    assert (overview["spans"], overview["traces"], overview["runs"], overview["reconciled_runs"]) == (
        10,
        4,
        4,
        3,
    )
    (process,) = overview["counters"]
    assert set(process) == {"pid", "service_name", "started_unix_nano", "time_unix_nano", "counts"}
    assert process["pid"] == os.getpid()  # the recording ran in this process
    assert process["counts"] == {"dropped.ledger_claims": 1}
    assert data["otlp"] == [
        {"signal": "traces", "requested": False, "exported": False, "endpoint": None, "protocol": None},
        {"signal": "logs", "requested": False, "exported": False, "endpoint": None, "protocol": None},
    ]
    assert (data["capture_content"], data["service_name"]) == (False, None)
    assert data["problems"] == [
        f"process {os.getpid()} ({process['service_name']}) recorded dropped.ledger_claims=1"
    ]
    assert data["notes"] == [
        "openai and tallyspan_openai both instrument openai under opentelemetry-instrument: tallyspan joins "
        "the other's model span where it can (one span a call, checked), and the report counts a call traced "
        "twice once; to keep tallyspan's alone, set OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=openai"
    ]


def test_doctor_works_in_a_fresh_shell_with_no_app_and_no_store(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-yet.db"
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and not key.startswith("TALLYSPAN_")
    }
    done = subprocess.run(
        [sys.executable, "-m", "tallyspan", "--db", str(missing), "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["data"]
    assert data["store"] == {"path": str(missing), "exists": False, "error": None, "overview": None}
    assert (data["contracts"]["path"], data["contracts"]["stages"]) == (None, [])
    assert data["problems"] == []
    assert {item["name"] for item in data["instrumentors"]} >= {"tallyspan_openai", "tallyspan_anthropic"}
    assert not missing.exists()
    text = subprocess.run(
        [sys.executable, "-m", "tallyspan", "--db", str(missing), "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert text.returncode == 0
    assert f"Store: {missing} (nothing recorded there yet)" in text.stdout
    assert "Contracts: none given (--contracts FILE or TALLYSPAN_CONTRACTS)" in text.stdout
    assert text.stdout.rstrip().endswith("No problems found.")


def test_a_misspelt_stage_in_the_contracts_is_a_problem_naming_the_stages(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    typo = tmp_path / "contracts.yaml"
    typo.write_text("contracts:\n  weekly_reprot:\n    min_chars: 60\n  triage: {}\n", encoding="utf-8")
    monkeypatch.setenv("TALLYSPAN_CONTRACTS", str(typo))
    code, data = _doctor("--db", str(recorded.path))
    assert code == 1
    assert (data["contracts"]["path"], data["contracts"]["given_by"]) == (str(typo), "TALLYSPAN_CONTRACTS")
    assert data["contracts"]["stages"] == [
        {"stage": "triage", "contract": "triage", "calls": 1, "violating": 1},
        {"stage": "weekly_report", "contract": None, "calls": 3, "violating": 1},
        {"stage": "weekly_reprot", "contract": "weekly_reprot", "calls": 0, "violating": 0},
    ]
    assert (
        "stage 'weekly_report' has 3 model call(s) in the store but no contract (stages with one: triage, "
        "weekly_reprot); a misspelt stage name turns its checks off"
    ) in data["problems"]


def test_a_default_contract_binds_every_stage_and_match_rules_are_listed(
    recorded: Recorded, tmp_path: Path
) -> None:
    contracts = tmp_path / "contracts.yaml"
    contracts.write_text(
        "contracts:\n  short: {max_chars: 100}\ndefault: {min_chars: 1}\n"
        "match:\n  - {contract: short, agent: 'triage-*'}\n",
        encoding="utf-8",
    )
    _, data = _doctor("--db", str(recorded.path), "--contracts", str(contracts))
    assert data["contracts"]["default"] is True
    assert data["contracts"]["match_rules"] == [
        {"contract": "short", "stage": None, "agent": "triage-*", "model": None}
    ]
    assert [(s["stage"], s["contract"]) for s in data["contracts"]["stages"]] == [
        ("short", "short"),
        ("triage", "default"),
        ("weekly_report", "default"),
    ]
    assert not any("no contract" in problem for problem in data["problems"])
    text = CliRunner().invoke(main, ["--db", str(recorded.path), "doctor", "--contracts", str(contracts)])
    lines = text.output.splitlines()
    assert lines[lines.index(f"Contracts: {contracts} (from --contracts)") + 1 :][:3] == [
        "  a default contract applies to every stage without one",
        "  match rule: contract short, agent triage-*",
        "  stage          contract  calls in store  violating",
    ]


def test_a_contracts_file_that_cannot_load_is_reported_not_raised(recorded: Recorded, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("contract:\n  report:\n    min_chars: 10\n", encoding="utf-8")
    code, data = _doctor("--db", str(recorded.path), "--contracts", str(bad))
    assert code == 1
    assert data["contracts"]["error"].startswith(f"{bad}:1, field 'contract'")
    assert data["problems"][0] == f"the contracts file cannot be used: {data['contracts']['error']}"
    text = CliRunner().invoke(main, ["--db", str(recorded.path), "doctor", "--contracts", str(bad)])
    assert text.exit_code == 1
    assert f"  cannot be used: {bad}:1" in text.output


def test_otlp_destinations_follow_the_standard_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "weekly-agent")
    code, data = _doctor("--db", str(tmp_path / "none.db"))
    assert code == 0
    assert data["otlp"] == [
        {
            "signal": "traces",
            "requested": True,
            "exported": True,
            "endpoint": "http://127.0.0.1:4318/v1/traces",
            "protocol": "http/protobuf",
        },
        {
            "signal": "logs",
            "requested": True,
            "exported": True,
            "endpoint": "http://127.0.0.1:4317",
            "protocol": "grpc",
        },
    ]
    assert (data["capture_content"], data["service_name"]) == (True, "weekly-agent")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:6006/v1/traces")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    text = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), "doctor"]).output
    assert "  traces (checked spans): http://127.0.0.1:6006/v1/traces over http/protobuf" in text
    assert "  logs (ledger records): not exported (no OTEL_EXPORTER_OTLP_* endpoint set)" in text
    assert "  message content exported: yes; service name: weekly-agent" in text


def test_disabled_instrumentations_are_marked_and_silence_the_double_span_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "openai, tallyspan_mcp")
    code, data = _doctor("--db", str(tmp_path / "none.db"))
    assert code == 0
    by_name = {item["name"]: item for item in data["instrumentors"]}
    assert (by_name["openai"]["disabled"], by_name["openai"]["patched_by"]) == (True, [])
    assert by_name["tallyspan_mcp"]["patched_by"] == ["tallyspan.instrument()"]
    assert data["notes"] == []


def test_doctor_text_has_every_section(recorded: Recorded) -> None:
    result = CliRunner().invoke(
        main,
        ["--db", str(recorded.path), "doctor", "--contracts", str(recorded.contracts)],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("tallyspan doctor — tallyspan ")
    for heading in (
        "Instrumentors (opentelemetry_instrumentor entry points)",
        f"Contracts: {recorded.contracts} (from --contracts)",
        "Where spans and ledger records go",
        f"Store: {recorded.path}",
        "OTLP",
        "Problems",
    ):
        assert heading in lines
    assert any(
        line.split()[:3] == ["tallyspan_openai", "installed", "tallyspan.instrument(),"] for line in lines
    )
    assert "    dropped.ledger_claims 1" in lines
    assert lines[-1].startswith(f"  - process {os.getpid()} (")
    assert lines[-1].endswith(") recorded dropped.ledger_claims=1")


def test_otlp_endpoints_default_per_protocol_and_grpc_takes_the_base_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")  # asked for, with no endpoint: the exporters' defaults
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc")
    _, data = _doctor("--db", str(tmp_path / "none.db"))
    assert [(signal["endpoint"], signal["protocol"]) for signal in data["otlp"]] == [
        ("http://localhost:4318/v1/traces", "http/protobuf"),
        ("http://localhost:4317", "grpc"),
    ]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:14317")
    _, data = _doctor("--db", str(tmp_path / "none.db"))
    assert [signal["endpoint"] for signal in data["otlp"]] == [
        "http://127.0.0.1:14317/v1/traces",
        "http://127.0.0.1:14317",
    ]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:14318/tenants/BOX/")  # a path: kept
    _, data = _doctor("--db", str(tmp_path / "none.db"))
    assert data["otlp"][0]["endpoint"] == "http://127.0.0.1:14318/tenants/BOX/v1/traces"


def _utc(unix_nano: int) -> str:
    return datetime.fromtimestamp(unix_nano // 10**9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.usefixtures("tokyo_clock")  # times in UTC, not in the local zone
def test_doctor_text_says_what_each_part_does(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contracts = tmp_path / "contracts.yaml"
    contracts.write_text(
        "contracts:\n  short: {max_chars: 100}\n  weekly_reprot: {min_chars: 60}\n"
        "match:\n  - {contract: short, agent: 'triage-*'}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "openai")
    monkeypatch.setitem(sys.modules, "tallyspan_instrumentors.mcp", None)  # a plugin that fails to import
    _, data = _doctor("--db", str(recorded.path), "--contracts", str(contracts))
    result = CliRunner().invoke(main, ["--db", str(recorded.path), "doctor", "--contracts", str(contracts)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[:3] == [f"tallyspan doctor — tallyspan {data['version']}", "", lines[2]]
    assert lines[2] == "Instrumentors (opentelemetry_instrumentor entry points)"
    assert lines[3].split() == ["name", "library", "patched", "by", "note"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[4 : lines.index("", 4)]}
    assert rows["openai"] == [
        "installed",
        "nothing",
        "disabled",
        "by",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
    ]
    assert rows["tallyspan_openai"] == [
        "installed", "tallyspan.instrument(),", "opentelemetry-instrument", "-",
    ]  # fmt: skip
    assert rows["tallyspan_mcp"][:5] == ["missing", "nothing", "could", "not", "load"]
    contracts_at = lines.index(f"Contracts: {contracts} (from --contracts)")
    assert lines[contracts_at + 1 : contracts_at + 8] == [
        "  match rule: contract short, agent triage-*",
        "  stage          contract           calls in store  violating",
        "  short          short                           0          0",
        "  triage         (none: unchecked)               1          1",
        "  weekly_report  (none: unchecked)               3          1",
        "  weekly_reprot  weekly_reprot                   0          0",
        "",
    ]
    overview = data["store"]["overview"]
    (process,) = overview["counters"]
    store_at = lines.index(f"Store: {recorded.path}")
    assert lines[store_at + 1 : store_at + 4] == [
        f"  10 spans in 4 traces, 4 runs, 3 reconciled; from {_utc(overview['first_span_unix_nano'])} "
        f"to {_utc(overview['last_span_unix_nano'])} UTC",
        f"  process {process['pid']} ({process['service_name']}), last recorded "
        f"{_utc(process['time_unix_nano'])} UTC:",
        "    dropped.ledger_claims 1",
    ]
    assert lines[lines.index("Problems") + 1 :] == [f"  - {problem}" for problem in data["problems"]]
    assert data["problems"][0].startswith(
        "instrumentor tallyspan_mcp cannot load: could not load tallyspan_instrumentors.mcp:MCPInstrumentor: "
    )


def test_doctor_text_of_stores_with_no_span_and_with_no_loss(
    filled: Filled, store_without_spans: Path
) -> None:
    # ``filled`` first: its store is written before this process drops the claim it records.
    lonely = store_without_spans
    result = CliRunner().invoke(main, ["--db", str(lonely), "doctor"])
    lines = result.output.splitlines()
    store_at = lines.index(f"Store: {lonely}")
    assert lines[store_at + 1 : store_at + 4] == [
        "  0 spans in 0 traces, 0 runs, 0 reconciled; from - to - UTC",
        lines[store_at + 2],
        "    dropped.ledger_claims 1",
    ]
    assert lines[store_at + 2].startswith(f"  process {os.getpid()} (unknown service), last recorded ")
    assert lines[-1] == f"  - process {os.getpid()} (unknown service) recorded dropped.ledger_claims=1"
    assert lines[:-1].count("  no drops or errors recorded by the processes that wrote it") == 0
    tallyspan.reset_stats()
    result = CliRunner().invoke(main, ["--db", str(filled.path), "doctor"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    store_at = lines.index(f"Store: {filled.path}")
    assert lines[store_at + 2] == "  no drops or errors recorded by the processes that wrote it"
    assert lines[store_at + 3 : store_at + 4] == ["OTLP"]
    assert lines[-1] == "No problems found."


_THIRD_PARTY = """\
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor


class _Instrumentor(BaseInstrumentor):
    def _instrument(self, **kwargs):
        pass

    def _uninstrument(self, **kwargs):
        pass


class MissingLibraryInstrumentor(_Instrumentor):
    def instrumentation_dependencies(self):
        return ["tallyspan-test-absent-library >= 1.0"]


class SecondOpenAIInstrumentor(_Instrumentor):
    def instrumentation_dependencies(self):
        return ["openai >= 1.0"]
"""


@pytest.fixture
def third_party_instrumentors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution of two other instrumentors: one for a library that is not installed, one
    more for openai (beside opentelemetry-instrumentation-openai-v2's)."""
    site = tmp_path / "site"
    (site / "third_party_instrumentors-1.0.dist-info").mkdir(parents=True)
    (site / "third_party_instrumentors.py").write_text(_THIRD_PARTY, encoding="utf-8")
    (site / "third_party_instrumentors-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: third-party-instrumentors\nVersion: 1.0\n", encoding="utf-8"
    )
    (site / "third_party_instrumentors-1.0.dist-info" / "entry_points.txt").write_text(
        "[opentelemetry_instrumentor]\n"
        "absent_library = third_party_instrumentors:MissingLibraryInstrumentor\n"
        "openai_second = third_party_instrumentors:SecondOpenAIInstrumentor\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "third_party_instrumentors", raising=False)


@pytest.mark.usefixtures("third_party_instrumentors")
def test_doctor_shows_a_library_missing_and_names_every_other_instrumentor_of_a_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tallyspan_instrumentors.mcp", None)  # a plugin that fails to import
    code, data = _doctor("--db", str(tmp_path / "none.db"))
    assert code == 1  # the plugin that cannot load; a library not installed is no problem of the set-up
    by_name = {item["name"]: item for item in data["instrumentors"]}
    assert by_name["absent_library"] == {
        "name": "absent_library",
        "target": "third_party_instrumentors:MissingLibraryInstrumentor",
        "tallyspan": False,
        "requires": ["tallyspan-test-absent-library >= 1.0"],
        "library_installed": False,
        "disabled": False,
        "patched_by": [],
        "problem": 'This instrumentation only instruments "tallyspan-test-absent-library >= 1.0", but no '
        "installed version was found, so nothing can be instrumented.",
    }
    assert (by_name["tallyspan_mcp"]["requires"], by_name["tallyspan_mcp"]["patched_by"]) == ([], [])
    assert by_name["tallyspan_mcp"]["problem"].startswith(
        "could not load tallyspan_instrumentors.mcp:MCPInstrumentor: ModuleNotFoundError: "
    )
    assert data["notes"] == [
        "openai and openai_second and tallyspan_openai both instrument openai under opentelemetry-instrument: "
        "tallyspan joins the other's model span where it can (one span a call, checked), and the report counts "
        "a call traced twice once; to keep tallyspan's alone, set "
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=openai,openai_second"
    ]
    text = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), "doctor"]).output.splitlines()
    row = next(line for line in text if line.startswith("  absent_library "))
    assert row.split()[1:5] == ["missing", "nothing", "This", "instrumentation"]


def test_doctor_without_our_own_instrumentor_of_a_library_has_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "tallyspan_openai")
    _, data = _doctor("--db", str(tmp_path / "none.db"))
    assert data["notes"] == []


def test_doctor_in_a_bare_environment_is_the_pinned_text(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    code, data = _doctor("--db", str(missing))
    assert code == 0
    assert data["version"] == tallyspan.__version__
    assert data["store"] == {"path": str(missing), "exists": False, "error": None, "overview": None}
    assert data["contracts"] == {
        "path": None, "given_by": None, "error": None, "contracts": [], "default": False, "match_rules": [],
        "stages": [],
    }  # fmt: skip
    result = CliRunner().invoke(main, ["--db", str(missing), "doctor"])
    lines = result.output.splitlines()
    start = lines.index(
        "Contracts: none given (--contracts FILE or TALLYSPAN_CONTRACTS); only the default checks run"
    )
    assert lines[start - 1 : start + 11] == [
        "",
        "Contracts: none given (--contracts FILE or TALLYSPAN_CONTRACTS); only the default checks run",
        "  (none)",
        "",
        "Where spans and ledger records go",
        f"Store: {missing} (nothing recorded there yet)",
        "OTLP",
        "  traces (checked spans): not exported (no OTEL_EXPORTER_OTLP_* endpoint set)",
        "  logs (ledger records): not exported (no OTEL_EXPORTER_OTLP_* endpoint set)",
        "  message content exported: no; service name: (from the app)",
        "",
        *[f"Note: {note}" for note in data["notes"]],
    ]
    assert lines[start + 11 :] == ["No problems found."]


def test_doctor_names_what_is_asked_for_but_cannot_be_exported_or_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the tallyspan[grpc] extra: what the import sees when it is not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:14318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    bogus = tmp_path / "notes.db"
    bogus.write_bytes(b"not a database at all" * 200)
    refused = CliRunner().invoke(main, ["--db", str(bogus), "doctor"])
    assert (refused.exit_code, refused.output) == (
        2,
        f"Error: {bogus} is not a tallyspan store: it is not an SQLite database; it was left untouched\n",
    )
    missing = tmp_path / "none.db"
    code, data = _doctor("--db", str(missing))
    assert code == 1
    assert (data["store"]["path"], data["store"]["exists"], data["store"]["overview"]) == (
        str(missing),
        False,
        None,
    )
    assert data["otlp"][1]["endpoint"] == "http://127.0.0.1:14318/v1/logs"
    assert data["problems"] == [
        "OTLP traces over grpc were asked for but are not exported: pip install 'tallyspan[grpc]'",
    ]
    text = CliRunner().invoke(main, ["--db", str(missing), "doctor"]).output.splitlines()
    otlp = text.index("OTLP")
    assert text[otlp + 1 : otlp + 3] == [
        "  traces (checked spans): http://127.0.0.1:14318 over grpc (NOT exported)",
        "  logs (ledger records): http://127.0.0.1:14318/v1/logs over http/protobuf",
    ]
    assert text[-2:] == ["Problems", *(f"  - {problem}" for problem in data["problems"])]


def test_a_stage_with_calls_and_no_contract_in_a_file_without_any(recorded: Recorded, tmp_path: Path) -> None:
    empty = tmp_path / "contracts.yaml"
    empty.write_text("contracts: {}\n", encoding="utf-8")
    _, data = _doctor("--db", str(recorded.path), "--contracts", str(empty))
    assert (
        "stage 'triage' has 1 model call(s) in the store but no contract (stages with one: none); "
        "a misspelt stage name turns its checks off"
    ) in data["problems"]


class _Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text")


def test_a_process_that_recorded_several_counters_is_named_with_each(tmp_path: Path) -> None:
    tallyspan.ledger.claim("c1", "search", "succeeded")  # outside any run: dropped and counted
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("agent"):
        tallyspan.ledger.claim("c2", _Unprintable(), "succeeded")  # type: ignore[arg-type]  # swallowed
    provider.shutdown()
    path = tmp_path / "counted.db"
    exporter = SQLiteSpanExporter(path)
    exporter.export([])
    exporter.shutdown()
    result = CliRunner().invoke(main, ["--db", str(path), "doctor"])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"  - process {os.getpid()} (unknown service) recorded dropped.ledger_claims=1, errors.ledger.claim=1"
    )


def test_the_apps_waits_for_the_worker_are_shown_but_are_no_problem(tmp_path: Path) -> None:
    """``backpressure.worker_turns`` says the app's thread waited for our worker: a figure, not a loss."""
    from tallyspan_processors import OffThreadProcessor

    tallyspan.reset_stats()
    processor = OffThreadProcessor([], max_queue_size=16, batch_delay_millis=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.get_tracer("test").start_span("behind").end()  # 16 // 16 = 1 span waits: a turn
    assert provider.force_flush(10_000)
    provider.shutdown()
    turns = tallyspan.stats()["backpressure.worker_turns"]
    path = tmp_path / "waited.db"
    exporter = SQLiteSpanExporter(path)
    exporter.export([])
    exporter.shutdown()
    code, data = _doctor("--db", str(path))
    assert code == 0
    assert data["problems"] == []
    (process,) = data["store"]["overview"]["counters"]
    assert process["counts"] == {"backpressure.worker_turns": turns}
    text = CliRunner().invoke(main, ["--db", str(path), "doctor"])
    assert f"    backpressure.worker_turns {turns}" in text.output.splitlines()
    assert text.output.rstrip().endswith("No problems found.")


def test_doctor_reports_a_store_that_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # even root cannot create anything under a regular file
    store = blocker / "t.db"
    code, data = _doctor("--db", str(store))
    assert code == 1
    reason = f"cannot be written: {blocker} is not a directory; tallyspan.instrument() stores nothing"
    assert data["store"]["error"] == reason
    assert f"the store at {store} {reason}" in data["problems"]
    text = CliRunner().invoke(main, ["--db", str(store), "doctor"]).output
    assert f"Store: {store} {reason}" in text
    assert "No problems found" not in text
