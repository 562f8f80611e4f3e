"""Every instrumentor loads without its library: ``instrument()`` loads each entry point, then asks
whether the library is installed, so an app with only ``openai`` must not pay an import error (and a
logged traceback) for LangChain, MCP or the Agents SDK."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest

#: The top-level modules each of our entry points instruments.
LIBRARIES = {
    "tallyspan_openai": ["openai"],
    "tallyspan_anthropic": ["anthropic"],
    "tallyspan_ollama": ["ollama"],
    "tallyspan_langchain": ["langchain_core", "langgraph", "langchain_openai", "langchain_anthropic"],
    "tallyspan_mcp": ["mcp"],
    "tallyspan_openai_agents": ["agents"],
}


def test_the_table_covers_every_entry_point_of_ours() -> None:
    ours = {
        entry_point.name
        for entry_point in entry_points(group="opentelemetry_instrumentor")
        if entry_point.value.startswith("tallyspan_instrumentors")
    }
    assert ours == set(LIBRARIES)


@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_the_entry_point_loads_with_its_library_missing(name: str) -> None:
    blocked = LIBRARIES[name]
    code = (
        "import sys\n"
        # None in sys.modules makes `import x` raise ModuleNotFoundError, as if x were not installed.
        f"for module in {blocked!r}:\n"
        "    sys.modules[module] = None\n"
        "from importlib.metadata import entry_points\n"
        f"(entry_point,) = entry_points(group='opentelemetry_instrumentor', name={name!r})\n"
        "instrumentor = entry_point.load()()\n"
        "print(sorted(instrumentor.instrumentation_dependencies()))\n"
        f"assert not any(module in sys.modules and sys.modules[module] is not None for module in {blocked!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[")


@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_instrumenting_imports_nothing_until_the_app_does(name: str) -> None:
    """``instrument()`` in an app that has the library installed but never imports it pays nothing."""
    code = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        f"(entry_point,) = entry_points(group='opentelemetry_instrumentor', name={name!r})\n"
        "instrumentor = entry_point.load()()\n"
        "instrumentor.instrument(tracer_provider=TracerProvider())\n"
        f"imported = [module for module in {LIBRARIES[name]!r} if module in sys.modules]\n"
        "assert imported == [], imported\n"
        "instrumentor.uninstrument()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_langchain_is_patched_when_the_app_imports_it_and_unpatched_after() -> None:
    code = (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from tallyspan_instrumentors.langchain import LangChainInstrumentor\n"
        "instrumentor = LangChainInstrumentor()\n"
        "instrumentor.instrument(tracer_provider=TracerProvider())\n"
        "assert instrumentor.handler is None\n"
        "from langchain_core.language_models.chat_models import BaseChatModel\n"
        "from langchain_core.callbacks.base import BaseCallbackManager\n"
        "assert hasattr(BaseChatModel._generate_with_cache, '__wrapped__')\n"
        "assert hasattr(BaseCallbackManager.__init__, '__wrapped__')\n"
        "assert instrumentor.handler is not None\n"
        "instrumentor.uninstrument()\n"
        "assert not hasattr(BaseChatModel._generate_with_cache, '__wrapped__')\n"
        "assert instrumentor.handler is None\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_module_of_the_instrumentors_imports() -> None:
    """Each module imports with the libraries installed (whatever wrapt the resolver chose: a proxy
    class subscripted at run time, ``wrapt.ObjectProxy[Any]``, failed on wrapt 1.x and took every
    instrumentor with it). In a subprocess: importing must not leak into this process's libraries."""
    code = (
        "import importlib, pkgutil, tallyspan_instrumentors as root\n"
        "names = [m.name for m in pkgutil.walk_packages(root.__path__, root.__name__ + '.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= len(LIBRARIES) * 2  # a package and its modules each, not an empty walk
