"""The plugin contract: the plugin packages take from the core only its public modules and ``tallyspan.plugin``.

Private core modules may move; a plugin that imports one breaks with them. docs/architecture.md writes
the contract down; this test keeps the code to it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import tallyspan.plugin

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_ROOTS = (
    ROOT / "instrumentors" / "tallyspan_instrumentors",
    ROOT / "processors" / "tallyspan_processors",
    ROOT / "exporters" / "tallyspan_exporters",
)
SURFACE = (
    "tallyspan.plugin",
    "tallyspan.plugin.instrumentors",
    "tallyspan.plugin.processors",
    "tallyspan.plugin.exporters",
)
ALLOWED = {"tallyspan", "tallyspan.semconv", "tallyspan.ledger", *SURFACE}
CORE_PACKAGE = "tallyspan"


def _core_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, core module, inside a function) for every import of the core in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module]
            for name in names:
                if name == CORE_PACKAGE or name.startswith(f"{CORE_PACKAGE}."):
                    found.append((child.lineno, name, nested))  # type: ignore[attr-defined]
            visit(child, nested)

    visit(tree, False)
    return found


def _plugin_files() -> list[Path]:
    return sorted(path for root in PLUGIN_ROOTS for path in root.rglob("*.py"))


def test_plugin_files_are_found() -> None:
    assert len(_plugin_files()) > 40


@pytest.mark.parametrize("path", _plugin_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_import_only_the_plugin_surface(path: Path) -> None:
    outside = [(line, module) for line, module, _ in _core_imports(path) if module not in ALLOWED]
    assert outside == [], f"{path.relative_to(ROOT)} imports private core modules: {outside}"


def test_no_module_reaches_up_into_instrument_from_a_function() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in (*_plugin_files(), *sorted((ROOT / "src" / "tallyspan").rglob("*.py")))
        for line, module, in_function in _core_imports(path)
        if in_function and module == "tallyspan._instrument"
    ]
    assert offenders == []


@pytest.mark.parametrize("module_name", SURFACE)
def test_the_surface_exports_what_it_lists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert tallyspan.plugin.__version__ == tallyspan.__version__


def test_the_surface_is_narrow_and_each_name_has_one_home() -> None:
    """What every plugin uses stays under 25 names; each kind of plugin has a module of its own, and no
    name is offered twice."""
    modules = [importlib.import_module(name) for name in SURFACE]
    assert len(tallyspan.plugin.__all__) < 25
    names = [name for module in modules for name in module.__all__]
    assert len(names) == len(set(names))


def test_each_plugin_package_uses_the_module_of_its_kind_only() -> None:
    """An instrumentor that needed the check engine, or a processor the store's schema, would say that
    a part sits in the wrong package."""
    kinds = {
        "tallyspan_instrumentors": "tallyspan.plugin.instrumentors",
        "tallyspan_processors": "tallyspan.plugin.processors",
        "tallyspan_exporters": "tallyspan.plugin.exporters",
    }
    crossing = [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for path in _plugin_files()
        for line, module, _ in _core_imports(path)
        if module in SURFACE[1:] and module != kinds[path.relative_to(ROOT).parts[1]]
    ]
    assert crossing == []
