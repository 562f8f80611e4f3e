"""The core's folders depend downward only, and import no circle (issue 35; docs/architecture.md, "Layout
of the core").

Every module of ``src/tallyspan`` is parsed with ``ast``; every import counts, wherever it is: at the
top, under ``TYPE_CHECKING`` (a type-only import still makes the module know the other), inside a
function (a late import is a dependency all the same), inside ``try``. A failure names the file and the
line of each import that breaks the rule.

The layers, bottom up:

- the leaves at the top of the package (``_errors``, ``_fork``, ``_selfstats``, ``_version``, ``semconv``,
  ``_extensions``): they import nothing of tallyspan but each other;
- ``_contract``: the contracts (the model, reading a file within bounds, the patterns);
- ``_engine``: the check engine, one output against one contract;
- ``_books``: the ledger (it takes the violation types from the engine); never the contracts;
- ``_store``: the embedded store (it reads the ledger's records); never the contracts;
- the runtime: every other module at the top, ``_datasets``, ``cli``, ``testing``. It may import all.

Inside the runtime, ``_config`` (reading the environment) imports only the leaves: configuration knows no
contract or ledger type, so it sits in no circle with them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "tallyspan"

LEAVES = "leaves"
RUNTIME = "runtime"
LEAF_MODULES = frozenset({"_errors", "_fork", "_selfstats", "_version", "semconv", "_extensions"})
CORE_FOLDERS = ("_contract", "_engine", "_books", "_store")
#: What each layer may import besides itself; the runtime may import everything.
MAY_IMPORT: dict[str, frozenset[str]] = {
    LEAVES: frozenset(),
    "_contract": frozenset({LEAVES}),
    "_engine": frozenset({LEAVES, "_contract"}),
    "_books": frozenset({LEAVES, "_engine"}),
    "_store": frozenset({LEAVES, "_engine", "_books"}),
}
#: Runtime modules held to the leaves: the configuration knows no contract and no ledger.
LEAF_ONLY_RUNTIME = frozenset({"tallyspan._config"})


@dataclass(frozen=True)
class Import:
    """One import of a tallyspan module by another, where it is written."""

    source: str
    target: str
    file: Path
    line: int

    def where(self) -> str:
        return f"{self.file.relative_to(SRC.parent)}:{self.line}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """True when ``name`` (``tallyspan.x.y``) is a module or package of the source tree, or the C module."""
    path = SRC.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file() or path.with_suffix(".pyi").is_file()


def _imports(path: Path) -> Iterator[Import]:
    source = _module_name(path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tallyspan" or alias.name.startswith("tallyspan."):
                    yield Import(source, alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module != "tallyspan" and not module.startswith("tallyspan."):
                continue
            for alias in node.names:  # ``from tallyspan import semconv`` imports the module semconv
                submodule = f"{module}.{alias.name}"
                yield Import(source, submodule if _is_module(submodule) else module, path, node.lineno)


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return RUNTIME  # tallyspan/__init__.py, the public API
    if parts[1] in CORE_FOLDERS:
        return parts[1]
    if len(parts) == 2 and parts[1] in LEAF_MODULES:
        return LEAVES
    return RUNTIME


def _all_imports() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in _imports(path)]


def _upward(imports: list[Import]) -> list[str]:
    broken = []
    for found in imports:
        source, target = _layer(found.source), _layer(found.target)
        if found.source in LEAF_ONLY_RUNTIME:
            allowed = frozenset({LEAVES})
        elif source in (target, RUNTIME):
            continue
        else:
            allowed = MAY_IMPORT[source]
        if target not in allowed:
            broken.append(
                f"{found.where()}: {found.source} ({source}) imports {found.target} ({target}), "
                f"which is not below it"
            )
    return list(dict.fromkeys(broken))  # ``from m import a, b`` is one import


def _cycles(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in edges.get(node, {}):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _describe(component: list[str], edges: dict[str, dict[str, Import]]) -> str:
    members = set(component)
    lines = [" <-> ".join(component) + ":"]
    for source in component:
        for target, found in sorted(edges.get(source, {}).items()):
            if target in members:
                lines.append(
                    f"  {found.where()}: {source} -> {target} ({found.source} imports {found.target})"
                )
    return "\n".join(lines)


def test_every_module_is_parsed_and_the_scan_sees_each_kind_of_import() -> None:
    imports = {(found.source, found.target) for found in _all_imports()}
    # A top-level import, a type-only one (plugin/processors.py, under TYPE_CHECKING), a function-level one
    # (_contract_loading.py, inside load_contracts), and ``from tallyspan import semconv`` as the module.
    assert ("tallyspan._engine._checks", "tallyspan._contract._contracts") in imports
    assert ("tallyspan.plugin.processors", "tallyspan._engine._checks") in imports
    assert ("tallyspan._contract_loading", "tallyspan._contract._contracts") in imports
    assert ("tallyspan._books._ledger", "tallyspan.semconv") in imports


def test_no_folder_imports_a_layer_above_it() -> None:
    broken = _upward(_all_imports())
    assert not broken, "imports that point up (docs/architecture.md, 'Layout of the core'):\n" + "\n".join(
        broken
    )


def test_no_circle_between_the_folders() -> None:
    edges: dict[str, dict[str, Import]] = {}
    for found in _all_imports():
        source, target = _layer(found.source), _layer(found.target)
        if source != target:
            edges.setdefault(source, {}).setdefault(target, found)
    cycles = _cycles(edges)
    assert not cycles, "circles between the core's layers:\n" + "\n".join(_describe(c, edges) for c in cycles)


@pytest.mark.parametrize("scope", [*CORE_FOLDERS, LEAVES])
def test_no_circle_between_the_modules_of_a_layer(scope: str) -> None:
    """Inside a folder too, each import goes one way (contract loading: ``_contracts`` reads a file with
    ``_contract_files`` and parses YAML with ``_contract_yaml``, which takes its bounds from
    ``_contract_files``)."""
    edges: dict[str, dict[str, Import]] = {}
    for found in _all_imports():
        if _layer(found.source) == scope and _layer(found.target) == scope and found.source != found.target:
            edges.setdefault(found.source, {}).setdefault(found.target, found)
    cycles = _cycles(edges)
    assert not cycles, f"circles between the modules of {scope}:\n" + "\n".join(
        _describe(c, edges) for c in cycles
    )


def test_the_check_engine_and_the_contracts_read_no_environment() -> None:
    """The engine gets whether to use its C scans from ``tallyspan._extensions``; the contracts get their file
    limit from their caller; only the runtime (``_config``) reads the rest of the environment."""
    readers = []
    for folder in CORE_FOLDERS:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "environb"}:
                    readers.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: os.{node.attr}")
    assert not readers, "the core's folders read the environment:\n" + "\n".join(readers)
