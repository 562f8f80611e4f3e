"""``tallyspan.semconv`` spells the OpenTelemetry names out (importing the conventions package costs
every app about 3 ms at start); each one must still be the package's own constant of the same name."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, openai_attributes
from opentelemetry.semconv.attributes import error_attributes, exception_attributes, server_attributes

from tallyspan import semconv


def _incubating(name: str) -> ModuleType | None:
    """A conventions module that older releases lack: the mcp and jsonrpc ones came after 0.60b0, which
    opentelemetry-sdk 1.39 (our floor, tested by CI's lowest-direct run) pins. tallyspan spells its names
    out and never imports the package, so there its MCP names are checked by the locked runs alone."""
    try:
        return importlib.import_module(f"opentelemetry.semconv._incubating.attributes.{name}")
    except ModuleNotFoundError:
        return None


#: Our name's prefix -> the conventions module that defines a constant of the same name.
UPSTREAM: dict[str, ModuleType | None] = {
    "GEN_AI_": gen_ai_attributes,
    "OPENAI_": openai_attributes,
    "MCP_": _incubating("mcp_attributes"),
    "JSONRPC_": _incubating("jsonrpc_attributes"),
    "ERROR_": error_attributes,
    "EXCEPTION_": exception_attributes,
    "SERVER_": server_attributes,
}


def _upstream_names() -> list[tuple[str, ModuleType]]:
    found = []
    for name in dir(semconv):
        module = next((module for prefix, module in UPSTREAM.items() if name.startswith(prefix)), None)
        if module is not None and hasattr(module, name):
            found.append((name, module))
    return found


def test_the_upstream_names_are_all_checked() -> None:
    names = {name for name, _ in _upstream_names()}
    assert {"GEN_AI_OPERATION_NAME", "GEN_AI_OUTPUT_MESSAGES", "ERROR_TYPE", "SERVER_PORT"} <= names
    if all(module is not None for module in UPSTREAM.values()):
        assert len(names) >= 54


@pytest.mark.parametrize(
    ("name", "module"), _upstream_names(), ids=lambda value: getattr(value, "__name__", value)
)
def test_each_name_is_the_conventions_own(name: str, module: ModuleType) -> None:
    assert getattr(semconv, name) == getattr(module, name)


def test_importing_semconv_loads_no_conventions_module() -> None:
    code = "import sys, tallyspan.semconv; print([m for m in sys.modules if m.startswith('opentelemetry.semconv')])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
