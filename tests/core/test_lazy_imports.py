"""The check engine and its libraries load only when they are used (issue 13: startup cost).

An instrumentor alone, ``import tallyspan``, or ``instrument()`` without contracts must not import the
check engine, the contracts, YAML, ``regex`` or ``jsonschema``; the names stay importable from
``tallyspan`` and ``tallyspan.plugin``. Each case runs in a fresh interpreter, since this test process
has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

HEAVY = ("tallyspan._checks", "tallyspan._contracts", "yaml", "regex", "jsonschema")


def _loaded_after(code: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_an_instrumentor_alone_imports_no_check_engine() -> None:
    loaded = _loaded_after(
        """
        from opentelemetry.sdk.trace import TracerProvider
        from tallyspan_instrumentors.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=TracerProvider())
        """
    )
    assert loaded == []


def test_instrument_without_contracts_imports_no_check_engine(tmp_path: Path) -> None:
    loaded = _loaded_after(
        f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument(
            tracer_provider=TracerProvider(), store={str(tmp_path / "t.db")!r}, instrumentors=["tallyspan_openai"]
        )
        """
    )
    assert loaded == []


def test_import_tallyspan_imports_no_check_engine() -> None:
    assert _loaded_after("import tallyspan, tallyspan.plugin") == []


def test_the_lazy_names_are_the_engine_s_own() -> None:
    loaded = _loaded_after(
        """
        import tallyspan
        from tallyspan import Contract, check
        from tallyspan.plugin import CheckResult, ContractSet

        assert check is tallyspan.check and Contract.__module__ == "tallyspan"
        assert CheckResult is tallyspan.CheckResult and ContractSet is tallyspan.ContractSet
        assert not check("判定：合格", Contract(required=["判定"])).violations
        """
    )
    assert "tallyspan._checks" in loaded
    assert "jsonschema" not in loaded  # only a contract with a json_schema needs it
