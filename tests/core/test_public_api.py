"""The public API, pinned: what users import, and that every signature is typed.

A name added, renamed or removed here is a change users see; this test makes it a deliberate one.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import tallyspan
import tallyspan.ledger
import tallyspan.pytest_plugin
import tallyspan.semconv
import tallyspan.testing

PUBLIC = {
    tallyspan: [
        "DEFAULT_STORE", "FAILURE_CLASS_OF", "CheckResult", "ConfigError", "Contract", "ContractError",
        "ContractSet", "FailureClass", "Instrumentation", "Rejected", "StageInfo", "TallyspanError",
        "Violation", "ViolationType", "check", "current_stage", "instrument", "instrumentation", "ledger",
        "load_contracts", "reset_stats", "run", "stage", "stats", "tool", "uninstrument",
    ],
    tallyspan.ledger: [
        "BALANCE_TYPES", "DEFAULT_LOG_TOOL", "OUTCOMES", "PROTOCOL_TYPES", "Claim", "Discrepancy",
        "LedgerEntry", "LedgerRecord", "LedgerSink", "LogToolSpec", "Observed", "Reconciliation", "claim",
        "normalize_outcome", "parse_log_arguments", "reconcile",
    ],
    tallyspan.testing: [
        "AnthropicReply", "AnthropicServer", "OllamaReply", "OllamaServer", "OpenAICompatibleServer",
        "RecordedRequest", "ReplyHandler", "ScriptedReply", "ScriptedToolCall",
    ],
    tallyspan.pytest_plugin: [
        "LedgerNotInOrderError", "LedgerVerdict", "TallyspanAssertionError", "TallyspanRecorder", "Verdict",
        "ViolationsFoundError", "tallyspan",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda module: module.__name__)
def test_all_is_exactly_the_pinned_names_and_each_is_importable(module: ModuleType) -> None:
    assert sorted(module.__all__) == sorted(PUBLIC[module])
    for name in module.__all__:
        assert getattr(module, name) is not None


@pytest.mark.parametrize("module", list(PUBLIC), ids=lambda module: module.__name__)
def test_every_public_callable_is_fully_annotated(module: ModuleType) -> None:
    unannotated: list[str] = []
    for name in module.__all__:
        target = getattr(module, name)
        functions = []
        if inspect.isfunction(target):
            functions.append((name, target))
        elif inspect.isclass(target):
            functions.extend(
                (f"{name}.{attr}", member)
                for attr, member in vars(target).items()
                if inspect.isfunction(member)
                and (not attr.startswith("_") or attr == "__init__")
                and member.__qualname__.startswith(f"{target.__qualname__}.")  # not typing's own
            )
        for label, function in functions:
            signature = inspect.signature(function)
            for parameter in signature.parameters.values():
                if parameter.name in ("self", "cls"):
                    continue
                if parameter.annotation is inspect.Parameter.empty:
                    unannotated.append(f"{label}({parameter.name})")
            if signature.return_annotation is inspect.Signature.empty:
                unannotated.append(f"{label} -> ?")
    assert unannotated == []


def test_public_objects_say_they_live_where_users_import_them() -> None:
    for name in ("instrument", "Contract", "ViolationType", "stage", "tool", "run"):
        assert getattr(tallyspan, name).__module__ == "tallyspan"
    assert tallyspan.ledger.LedgerSink.__module__ == "tallyspan.ledger"


def test_the_package_is_typed() -> None:
    assert (Path(tallyspan.__file__).parent / "py.typed").is_file()


def test_semconv_names_are_constants_and_ours_live_under_the_tallyspan_namespace() -> None:
    names = {
        name: value
        for name, value in vars(tallyspan.semconv).items()
        if name.isupper() and isinstance(value, str)
    }
    assert len(names) >= 100
    ours = {name: value for name, value in names.items() if value.startswith("tallyspan.")}
    # Every name we emit is lower-case dotted, the OpenTelemetry attribute naming rule.
    assert all(re.fullmatch(r"[a-z0-9_.]+", value) for value in ours.values()), ours
    for name in ("VIOLATION_TYPES", "STAGE", "LEDGER_BALANCED", "LEDGER_DISCREPANCY_TYPES", "CONTRACT"):
        assert ours[name].startswith("tallyspan.")
    assert tallyspan.semconv.VIOLATION_TYPES == "tallyspan.violation_types"
    assert tallyspan.semconv.STAGE == "tallyspan.stage"
