"""The check engine and its libraries load only when they are used (issue 13: startup cost).

An instrumentor alone, ``import tallyspan``, or ``instrument()`` without contracts must not import the
check engine, the contracts, YAML, ``regex``, ``jsonschema`` or OTLP export (the SDK's logs module,
``requests``); the names stay importable from ``tallyspan`` and ``tallyspan.plugin``. A contract is
still validated at ``instrument()`` (``regex`` compiles its patterns), but the language checks load
with the first check, YAML only for a YAML file and OTLP export only when an endpoint is configured.
Each case runs in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ENGINE = (
    "tallyspan._engine._checks",
    "tallyspan._engine._language",
    "tallyspan._engine._jsonschema",
    "jsonschema",
)
OTLP = ("opentelemetry.sdk._logs", "requests", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
HEAVY = (*ENGINE, *OTLP, "tallyspan._contract._contracts", "yaml", "regex")
#: Loaded by the store's writer thread with its first write (the database, the JSON of its rows), and by
#: nothing before it.
STORE = ("sqlite3", "orjson")
#: The semantic-conventions package: tallyspan.semconv spells its names out (tests/core/test_semconv.py).
CONVENTIONS = ("opentelemetry.semconv._incubating.attributes.gen_ai_attributes",)
#: How the OpenAI instrumentor reads each kind of call: loaded with the first call of that kind.
OPENAI_READING = tuple(
    f"tallyspan_instrumentors.openai._extract_{kind}" for kind in ("chat", "responses", "embeddings")
)
#: OpenTelemetry's BaseInstrumentor and its dependency check (packaging's parsers, about 15 ms): our
#: instrumentors keep its protocol without importing it, and decide the check without packaging.
INSTRUMENTOR_BASE = (
    "opentelemetry.instrumentation.instrumentor",
    "opentelemetry.instrumentation.dependencies",
    "opentelemetry.instrumentation._semconv",
    "packaging",
)
#: OpenTelemetry's instrumentation utils load the propagators from the environment (about 3 ms): the
#: instrumentors read its suppression keys themselves, the store's writer imports it with its first
#: write. (The MCP instrumentor propagates context, so it loads the propagators itself.)
INSTRUMENTATION_UTILS = ("opentelemetry.instrumentation.utils", "opentelemetry.propagate")
CONTRACT = {"language": "ja", "min_chars": 20, "required": ["判定"], "claims": {"allowed": ["導入企業300社"]}}


def _loaded_after(code: str, watched: tuple[str, ...] = HEAVY, **env: str) -> list[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps([name for name in {watched!r} if name in sys.modules]))
        """
    )
    # No OTLP endpoint from the environment running the tests: it would (rightly) load OTLP export.
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_EXPORTER_OTLP")}
    # pydantic loads every installed pydantic plugin with the first model it builds: Logfire's (logfire is
    # in the test extra, for tests/core/test_one_line_inits.py) imports Logfire, the SDK's logs and OTLP
    # export. That is what the plugin costs whoever has it installed, not what tallyspan loads.
    clean["PYDANTIC_DISABLE_PLUGINS"] = "logfire-plugin"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env={**clean, **env}
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_an_instrumentor_alone_imports_no_check_engine() -> None:
    loaded = _loaded_after(
        """
        from opentelemetry.sdk.trace import TracerProvider
        from tallyspan_instrumentors.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=TracerProvider())
        """,
        (*HEAVY, *STORE, *CONVENTIONS, *OPENAI_READING, *INSTRUMENTOR_BASE, *INSTRUMENTATION_UTILS),
    )
    assert loaded == []


def test_instrument_opens_no_store_before_the_first_span(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    setup = f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        tallyspan.instrument({{"report": {CONTRACT!r}}}, tracer_provider=provider, store={db!r}, instrumentors=[])
        """
    assert _loaded_after(setup, (*OTLP, *STORE, *INSTRUMENTOR_BASE, *INSTRUMENTATION_UTILS)) == []
    first_span = """
        provider.get_tracer("t").start_span("chat m", attributes={"gen_ai.operation.name": "chat"}).end()
        tallyspan.uninstrument()
        """
    assert _loaded_after(setup + first_span, (*OTLP, *STORE)) == list(STORE)
    assert (tmp_path / "t.db").exists()


def _entry_point_reads(instrumentors: str, db: Path) -> int:
    """How often ``instrument(instrumentors=...)`` read every installed distribution's entry points."""
    code = textwrap.dedent(
        f"""
        import importlib.metadata

        reads = []
        every = importlib.metadata.entry_points
        importlib.metadata.entry_points = lambda **params: reads.append(params) or every(**params)

        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument(tracer_provider=TracerProvider(), store={str(db)!r}, instrumentors={instrumentors})
        print(len(reads))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def test_instrument_reads_only_tallyspan_s_own_entry_points(tmp_path: Path) -> None:
    """Every distribution's entry points cost about 5 ms to read; ours are in one file."""
    assert _entry_point_reads("['tallyspan_openai']", tmp_path / "t.db") == 0
    assert _entry_point_reads("None", tmp_path / "t.db") == 0  # every instrumentor of ours
    # A bare library name may be another package's entry point (OpenLLMetry registers "openai").
    assert _entry_point_reads("['ollama']", tmp_path / "t.db") == 1


def test_instrument_without_contracts_imports_no_check_engine(tmp_path: Path) -> None:
    loaded = _loaded_after(
        f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument(
            tracer_provider=TracerProvider(), store={str(tmp_path / "t.db")!r}, instrumentors=["tallyspan_openai"]
        )
        """,
        (*HEAVY, *INSTRUMENTOR_BASE, *INSTRUMENTATION_UTILS),
    )
    assert loaded == []


def test_instrumenting_every_library_imports_no_instrumentor_base(tmp_path: Path) -> None:
    """Every instrumentor of ours (the one line's default): none needs packaging to tell that its library
    is installed in range (a missing one: tests/core/test_requirements.py)."""
    loaded = _loaded_after(
        f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        contracts = {{"report": {CONTRACT!r}}}
        done = tallyspan.instrument(contracts, tracer_provider=TracerProvider(), store={str(tmp_path / "t.db")!r})
        assert len(done.instrumentors) == 6, done.instrumentors  # the test extra installs every library
        """,
        INSTRUMENTOR_BASE,
    )
    assert loaded == []


def test_instrument_with_a_contract_mapping_validates_it_but_loads_no_engine_yaml_or_otlp(
    tmp_path: Path,
) -> None:
    loaded = _loaded_after(
        f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument({{"report": {CONTRACT!r}}}, tracer_provider=TracerProvider())
        """,
        TALLYSPAN_DB=str(tmp_path / "t.db"),
    )
    # the patterns are compiled: validated eagerly
    assert loaded == ["tallyspan._contract._contracts", "regex"]


def test_a_contract_without_patterns_loads_no_regex() -> None:
    loaded = _loaded_after(
        """
        import tallyspan

        contracts = tallyspan.load_contracts({"report": {"language": "ja", "min_chars": 5}})
        assert not tallyspan.check("判定：合格です。", contracts.contracts["report"]).violations
        """
    )
    assert "regex" not in loaded


def test_instrument_with_a_contracts_file_loads_yaml_but_no_engine_or_otlp(tmp_path: Path) -> None:
    path = tmp_path / "contracts.yaml"
    path.write_text("contracts:\n  report: {language: ja, required: ['判定']}\n", encoding="utf-8")
    loaded = _loaded_after(
        f"""
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument({str(path)!r}, tracer_provider=TracerProvider())
        """,
        TALLYSPAN_DB=str(tmp_path / "t.db"),
    )
    assert loaded == ["tallyspan._contract._contracts", "yaml", "regex"]


def test_an_otlp_endpoint_loads_otlp_export(tmp_path: Path) -> None:
    loaded = _loaded_after(
        """
        import tallyspan
        from opentelemetry.sdk.trace import TracerProvider

        tallyspan.instrument(tracer_provider=TracerProvider(), store=None, instrumentors=[])
        tallyspan.uninstrument()
        """,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        TALLYSPAN_SPOOL=str(tmp_path / "spool.db"),
    )
    assert set(OTLP) <= set(loaded)


def test_import_tallyspan_imports_no_check_engine() -> None:
    assert _loaded_after("import tallyspan, tallyspan.plugin") == []


def test_import_tallyspan_leaves_the_wiring_to_instrument() -> None:
    wiring = ("tallyspan._instrument", "tallyspan.ledger", "tallyspan._tool", "opentelemetry.instrumentation")
    assert _loaded_after("import tallyspan", wiring) == []
    assert _loaded_after("import tallyspan; tallyspan.instrument", wiring) == ["tallyspan._instrument"]


def test_the_lazy_names_are_the_engine_s_own() -> None:
    loaded = _loaded_after(
        """
        import tallyspan
        from tallyspan import Contract, check
        from tallyspan.plugin.processors import CheckResult, ContractSet

        assert check is tallyspan.check and Contract.__module__ == "tallyspan"
        assert CheckResult is tallyspan.CheckResult and ContractSet is tallyspan.ContractSet
        assert not check("判定：合格", Contract(required=["判定"])).violations
        """
    )
    assert "tallyspan._engine._checks" in loaded
    assert "jsonschema" not in loaded  # only a contract with a json_schema needs it
