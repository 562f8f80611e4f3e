"""Every collector config, Rotel file and Grafana dashboard parses, and names only what semconv defines.

A renamed attribute in ``tallyspan.semconv`` must fail here until collector-config/ and
README.md follow it: a filter that tests a name nobody emits silently drops everything.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

import tallyspan
from tallyspan import semconv
from tallyspan._config import DEFAULT_DB_PATH

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"
BACKENDS_DOC = ROOT / "README.md"

COLLECTOR_CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))
DASHBOARDS = sorted((CONFIG_DIR / "grafana").glob("*.json"))
ROTEL_ENV = CONFIG_DIR / "rotel" / "rotel.env"
ROTEL_PROCESSOR = CONFIG_DIR / "rotel" / "violations_only.py"

#: Dotted names of ours (attributes, events, spans, metrics), wherever they appear: OTTL, TraceQL, prose.
_DOTTED = re.compile(r"\b(?:tallyspan|gen_ai)\.[A-Za-z0-9_.]*[A-Za-z0-9_]")
#: Phoenix's filter spells them as nested keys: attributes['tallyspan']['ledger']['balanced'].
_NESTED = re.compile(r"\['(tallyspan|gen_ai)'\]((?:\['[A-Za-z0-9_]+'\])+)")
#: The same names after Prometheus normalisation ("." -> "_", "_total" on counters).
_UNDERSCORED = re.compile(r"\b(?:tallyspan|gen_ai)_[A-Za-z0-9_]*[A-Za-z0-9]")
_METRIC_SUFFIXES = ("_total",)


def _defined_names() -> set[str]:
    """Every ``tallyspan.*`` / ``gen_ai.*`` string semconv defines; prefixes also without their dot."""
    names: set[str] = set()
    for value in vars(semconv).values():
        if isinstance(value, str) and value.startswith(("tallyspan.", "gen_ai.")):
            names.add(value)
            names.add(value.rstrip("."))
    return names


def _prometheus_names(defined: Iterable[str]) -> set[str]:
    """The label and metric names the Prometheus exporter makes of our names."""
    underscored = {name.replace(".", "_") for name in defined}
    metrics = {
        value.replace(".", "_")
        for key, value in vars(semconv).items()
        if key.startswith("METRIC_") and isinstance(value, str)
    }
    return underscored | {metric + suffix for metric in metrics for suffix in _METRIC_SUFFIXES}


def _python_references() -> set[str]:
    """API references (``tallyspan.instrument``), package and entry point names, the store file: not telemetry."""
    api = {f"tallyspan.{name}" for name in dir(tallyspan) if not name.startswith("_")}
    # Modules named in the docs (tallyspan._engine._scan, the optional C module, has a stub whether built or not).
    source = Path(tallyspan.__file__).parent
    modules = {
        ".".join(("tallyspan", *path.relative_to(source).with_suffix("").parts))
        for pattern in ("*.py", "*.pyi")
        for path in source.rglob(pattern)
    }
    packages = {
        name
        for name in ("tallyspan_instrumentors", "tallyspan_processors", "tallyspan_exporters")
        if importlib.util.find_spec(name) is not None
    }
    instrumentors = {
        entry_point.name
        for entry_point in importlib.metadata.entry_points(group="opentelemetry_instrumentor")
        if entry_point.value.startswith("tallyspan_instrumentors")
    }
    return api | modules | packages | instrumentors | {DEFAULT_DB_PATH.name}


def undefined_names(text: str) -> set[str]:
    """The names of ours in ``text`` that semconv does not define (regex escapes are ignored)."""
    plain = text.replace("\\", "")
    defined = _defined_names()
    allowed = defined | _prometheus_names(defined) | _python_references()
    found = set(_DOTTED.findall(plain)) | set(_UNDERSCORED.findall(plain))
    found |= {root + "." + ".".join(re.findall(r"'([^']+)'", keys)) for root, keys in _NESTED.findall(plain)}
    return {name for name in found if name not in allowed}


def _checked_files() -> list[Path]:
    files = [*COLLECTOR_CONFIGS, *DASHBOARDS, ROTEL_ENV, ROTEL_PROCESSOR, CONFIG_DIR / "README.md"]
    if BACKENDS_DOC.exists():
        files.append(BACKENDS_DOC)
    return files


# --- the scanner itself can fail -----------------------------------------------------------------


def test_scanner_flags_a_misspelt_attribute_and_metric() -> None:
    text = (
        'attributes["tallyspan.violatd"] == true  # tallyspan_violation_total{gen_ai_nope="x"} '
        "'refusal' in attributes['tallyspan']['violation_type']"
    )
    assert undefined_names(text) == {
        "tallyspan.violatd",
        "tallyspan_violation_total",
        "gen_ai_nope",
        "tallyspan.violation_type",
    }


def test_scanner_accepts_semconv_names_in_every_spelling() -> None:
    text = (
        f'{{ span.{semconv.VIOLATED} = true }} attributes["{semconv.VIOLATION_TYPES}"] '
        'tallyspan_violations_total{tallyspan_violation_type="refusal"} '
        'delete_matching_keys(attributes, "^gen_ai\\\\.prompt\\\\..*") tallyspan.instrument() '
        "attributes['tallyspan']['ledger']['balanced'] == False"
    )
    assert undefined_names(text) == set()


# --- every file ----------------------------------------------------------------------------------


def test_the_expected_configs_are_all_there() -> None:
    names = {path.name for path in COLLECTOR_CONFIGS}
    assert names == {
        "otelcol-violations-only.yaml",
        "otelcol-tail-sampling.yaml",
        "otelcol-routing.yaml",
        "otelcol-strip-content.yaml",
        "otelcol-violation-metrics.yaml",
    }
    assert [path.name for path in DASHBOARDS] == ["tallyspan-violations.json"]
    assert ROTEL_ENV.is_file()
    assert ROTEL_PROCESSOR.is_file()


@pytest.mark.parametrize("path", _checked_files(), ids=lambda path: path.name)
def test_file_names_only_attributes_events_and_metrics_semconv_defines(path: Path) -> None:
    assert undefined_names(path.read_text(encoding="utf-8")) == set()


def _components(config: dict[str, Any], kind: str) -> set[str]:
    return set((config.get(kind) or {}).keys())


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda path: path.name)
def test_collector_config_parses_and_every_pipeline_uses_defined_components(path: Path) -> None:
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(config, dict), f"{path.name}: not a YAML mapping"
    pipelines = config["service"]["pipelines"]
    assert pipelines, f"{path.name}: no pipelines"
    connectors = _components(config, "connectors")
    receivers = _components(config, "receivers") | connectors
    processors = _components(config, "processors")
    exporters = _components(config, "exporters") | connectors
    used: set[str] = set()
    for name, pipeline in pipelines.items():
        for kind, defined in (("receivers", receivers), ("processors", processors), ("exporters", exporters)):
            missing = set(pipeline.get(kind, [])) - defined
            assert not missing, f"{path.name}: pipeline {name} uses undefined {kind} {sorted(missing)}"
            used |= set(pipeline.get(kind, []))
    # A connector must be both an exporter of one pipeline and a receiver of another.
    for connector in connectors:
        as_exporter = any(connector in p.get("exporters", []) for p in pipelines.values())
        as_receiver = any(connector in p.get("receivers", []) for p in pipelines.values())
        assert as_exporter, f"{path.name}: connector {connector} exports from no pipeline"
        assert as_receiver, f"{path.name}: connector {connector} feeds no pipeline"
    unused = (processors | _components(config, "exporters") | _components(config, "receivers")) - used
    assert not unused, f"{path.name}: defined but unused {sorted(unused)}"


def test_malformed_yaml_is_rejected_by_the_parser_the_test_uses() -> None:
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load("processors:\n  filter: [unclosed\n")


def test_violations_only_filter_keeps_violations_unbalanced_runs_and_errors() -> None:
    config = yaml.safe_load((CONFIG_DIR / "otelcol-violations-only.yaml").read_text(encoding="utf-8"))
    (condition,) = config["processors"]["filter/violations_only"]["traces"]["span"]
    assert condition.startswith("not (")
    assert f'attributes["{semconv.VIOLATED}"] == true' in condition
    assert f'attributes["{semconv.LEDGER_BALANCED}"] == false' in condition
    assert "status.code == STATUS_CODE_ERROR" in condition


def test_tail_sampling_matches_arrays_with_ottl_not_string_attribute() -> None:
    config = yaml.safe_load((CONFIG_DIR / "otelcol-tail-sampling.yaml").read_text(encoding="utf-8"))
    policies = {policy["name"]: policy for policy in config["processors"]["tail_sampling"]["policies"]}
    assert policies["violated"]["boolean_attribute"] == {"key": semconv.VIOLATED, "value": True}
    string_keys = {p["string_attribute"]["key"] for p in policies.values() if p["type"] == "string_attribute"}
    # string_attribute never matches a string[] attribute, so no policy may point it at one.
    assert semconv.VIOLATION_TYPES not in string_keys
    assert semconv.LEDGER_DISCREPANCY_TYPES not in string_keys
    ottl = policies["violation-ottl"]["ottl_condition"]
    assert f'ContainsValue(attributes["{semconv.VIOLATION_TYPES}"], "refusal")' in ottl["span"]
    assert f'name == "{semconv.EVENT_VIOLATION}"' in ottl["spanevent"]


def test_strip_content_deletes_every_content_attribute_from_spans_and_events() -> None:
    config = yaml.safe_load((CONFIG_DIR / "otelcol-strip-content.yaml").read_text(encoding="utf-8"))
    groups = {
        group["context"]: group["statements"]
        for group in config["processors"]["transform/strip_content"]["trace_statements"]
    }
    content = (
        semconv.GEN_AI_INPUT_MESSAGES,
        semconv.GEN_AI_OUTPUT_MESSAGES,
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS,
        semconv.GEN_AI_TOOL_CALL_ARGUMENTS,
        semconv.GEN_AI_TOOL_CALL_RESULT,
    )
    for context in ("span", "spanevent"):
        for name in content:
            assert f'delete_key(attributes, "{name}")' in groups[context], (context, name)


def test_count_connector_counts_violation_events_by_type_class_and_stage() -> None:
    config = yaml.safe_load((CONFIG_DIR / "otelcol-violation-metrics.yaml").read_text(encoding="utf-8"))
    metric = config["connectors"]["count"]["spanevents"][semconv.METRIC_VIOLATIONS]
    assert metric["conditions"] == [f'name == "{semconv.EVENT_VIOLATION}"']
    assert [attribute["key"] for attribute in metric["attributes"]] == [
        semconv.VIOLATION_TYPE,
        semconv.VIOLATION_FAILURE_CLASS,
        semconv.STAGE,
    ]
    spans = config["connectors"]["count"]["spans"]
    assert set(spans) == {semconv.METRIC_LEDGER_RUNS, semconv.METRIC_LEDGER_UNBALANCED_RUNS}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboard_parses_and_every_panel_queries_a_datasource(path: Path) -> None:
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert panels
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target.get("expr") or target.get("query"), panel["title"]


def test_dashboard_charts_violations_by_type_and_stage_and_lists_violating_traces() -> None:
    dashboard = json.loads((CONFIG_DIR / "grafana" / "tallyspan-violations.json").read_text(encoding="utf-8"))
    queries = [
        target.get("expr") or target.get("query")
        for p in dashboard["panels"]
        for target in p.get("targets", [])
    ]
    counter = semconv.METRIC_VIOLATIONS.replace(".", "_") + "_total"
    by_type = f"sum by ({semconv.VIOLATION_TYPE.replace('.', '_')})"
    by_stage = f"sum by ({semconv.STAGE.replace('.', '_')})"
    assert any(by_type in q and counter in q for q in queries)
    assert any(by_stage in q and counter in q for q in queries)
    assert any(q.startswith(f"{{ span.{semconv.VIOLATED} = true }}") for q in queries)
    assert any(f"span.{semconv.LEDGER_BALANCED}" in q for q in queries)


def test_malformed_json_is_rejected_by_the_parser_the_test_uses() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads('{"panels": [}')


#: A line of rotel.env: a Rotel setting whose value is a default the environment overrides.
_ROTEL_LINE = re.compile(r"(ROTEL_[A-Z_]+)=\$\{\1:-[^\s]+\}")


def _rotel_env(environment: dict[str, str]) -> dict[str, str]:
    """The Rotel settings rotel.env gives, loaded as it says (``set -a; . rotel.env; set +a``) in a POSIX
    shell whose environment is ``environment`` (and nothing else)."""
    for number, line in enumerate(ROTEL_ENV.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            assert _ROTEL_LINE.fullmatch(stripped), f"rotel.env line {number} is not NAME=${{NAME:-default}}"
    loaded = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; set +a; env', "sh", str(ROTEL_ENV)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    settings = dict(line.partition("=")[::2] for line in loaded.stdout.splitlines())
    return {key: value for key, value in settings.items() if key.startswith("ROTEL_")}


def _rotel_defaults(run_dir: str) -> dict[str, str]:
    return {
        "ROTEL_OTLP_GRPC_ENDPOINT": "127.0.0.1:4317",
        "ROTEL_OTLP_HTTP_ENDPOINT": "127.0.0.1:4318",
        "ROTEL_OTLP_WITH_TRACE_PROCESSOR": "collector-config/rotel/violations_only.py",
        "ROTEL_EXPORTER": "otlp",
        "ROTEL_OTLP_EXPORTER_ENDPOINT": "http://127.0.0.1:6006",
        "ROTEL_OTLP_EXPORTER_PROTOCOL": "http",
        "ROTEL_BATCH_TIMEOUT": "200ms",
        "ROTEL_PID_FILE": f"{run_dir}/rotel-agent.pid",
        "ROTEL_LOG_FILE": f"{run_dir}/rotel-agent.log",
    }


needs_sh = pytest.mark.skipif(shutil.which("sh") is None, reason="rotel.env is loaded by a POSIX shell")


@needs_sh
def test_rotel_env_gives_the_standard_ports_and_private_files_by_default(tmp_path: Path) -> None:
    path = os.environ.get("PATH", "")
    assert _rotel_env({"PATH": path, "XDG_RUNTIME_DIR": str(tmp_path)}) == _rotel_defaults(str(tmp_path))
    assert _rotel_env({"PATH": path, "TMPDIR": str(tmp_path / "t")}) == _rotel_defaults(str(tmp_path / "t"))
    assert _rotel_env({"PATH": path}) == _rotel_defaults("/tmp")


@needs_sh
def test_rotel_env_leaves_ports_and_files_the_environment_sets(tmp_path: Path) -> None:
    given = {
        "ROTEL_OTLP_GRPC_ENDPOINT": "127.0.0.1:14317",
        "ROTEL_OTLP_HTTP_ENDPOINT": "0.0.0.0:14318",
        "ROTEL_OTLP_EXPORTER_ENDPOINT": "http://collector.internal:4318",
        "ROTEL_PID_FILE": str(tmp_path / "run" / "rotel.pid"),
        "ROTEL_LOG_FILE": str(tmp_path / "log" / "rotel.log"),
    }
    settings = _rotel_env({"PATH": os.environ.get("PATH", ""), "XDG_RUNTIME_DIR": str(tmp_path), **given})
    assert settings == {**_rotel_defaults(str(tmp_path)), **given}


@needs_sh
def test_rotel_env_names_an_existing_processor_and_an_otlp_exporter() -> None:
    settings = _rotel_env({"PATH": os.environ.get("PATH", "")})
    assert (ROOT / settings["ROTEL_OTLP_WITH_TRACE_PROCESSOR"]).resolve() == ROTEL_PROCESSOR
    assert settings["ROTEL_EXPORTER"] == "otlp"
    compile(ROTEL_PROCESSOR.read_text(encoding="utf-8"), str(ROTEL_PROCESSOR), "exec")
