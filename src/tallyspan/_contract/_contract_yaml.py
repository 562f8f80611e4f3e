"""Parsing a YAML contracts file within bounds: what ``_contracts`` calls for a YAML file.

A module of its own so that PyYAML (about 10 ms to import) loads only when a YAML file is read:
contracts given as a mapping, a list or objects, or a TOML file, never import it. The bounds are
those of ``tallyspan._contract._contract_files``: more than :data:`MAX_DEPTH` levels of nesting or
:data:`MAX_NODES` values is refused while composing, before Python's recursion limit; a number longer
than :data:`MAX_NUMBER_CHARS` characters is refused before it is converted.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from tallyspan._contract._contract_files import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_NUMBER_CHARS,
    TOP_KEYS,
    contract_error_at,
)

try:  # libyaml's parser: about 10x faster than the pure-Python one on large files
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)


__all__ = ["parse_yaml"]


class _Refused(Exception):  # noqa: N818 - internal: carries where a YAML value was refused
    def __init__(self, message: str, *, path: tuple[Any, ...] = (), node: yaml.Node | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.node = node


class _BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A safe YAML loader that counts nesting and values while it composes, and bounds numbers."""

    def __init__(self, text: str) -> None:
        _Parser.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._nodes = 0
        self._path: list[Any] = []
        self.short_form = False
        self.failed_at: tuple[Any, ...] | None = None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> Any:
        named = index is not None  # a mapping's value (index: its key node) or a list's item (an int)
        if named and not self._path and isinstance(parent, yaml.MappingNode):
            # The top-level keys so far tell the short form {stage: contract}, whose paths need a prefix.
            keys = [key.value for key, _ in parent.value] + [getattr(index, "value", None)]
            self.short_form = not TOP_KEYS.intersection(key for key in keys if isinstance(key, str))
        if named:
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else index)
        try:
            self._nodes += 1
            if self._nodes > MAX_NODES:
                raise _Refused(f"the file holds more than {MAX_NODES:,} values", path=tuple(self._path))
            opens = isinstance(self.peek_event(), (yaml.MappingStartEvent, yaml.SequenceStartEvent))
            if opens and self._depth >= MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", path=tuple(self._path))
            self._depth += opens
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= opens
        except yaml.YAMLError:
            if self.failed_at is None:
                self.failed_at = tuple(self._path)  # the innermost place: the stack unwinds from here
            raise
        finally:
            if named:
                self._path.pop()

    def where(self, path: tuple[Any, ...] | None) -> tuple[Any, ...]:
        """``path`` as a path in the full form: the short form's gain their ``contracts`` prefix."""
        if not path:
            return ()
        return ("contracts", *path) if self.short_form else path

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, _Refused):
            raise
        except Exception as exc:  # a value the safe constructor cannot build (a 30th of February...)
            raise _Refused(f"cannot read this value: {type(exc).__name__}: {exc}", node=node) from exc

    def _construct_int(self, node: yaml.ScalarNode) -> Any:
        if len(str(node.value)) > MAX_NUMBER_CHARS:
            raise _Refused(
                f"a number of {len(str(node.value)):,} characters, more than {MAX_NUMBER_CHARS}", node=node
            )
        return self.construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader._construct_int)  # type: ignore[type-var]


def parse_yaml(text: str, file: str) -> tuple[Any, yaml.Node | None]:
    """The data of a YAML contracts file and its node tree (for line numbers).

    Raises:
        ContractError: invalid syntax, or over a limit while composing; names the file and the line.
    """
    loader = _BoundedLoader(text)
    node: yaml.Node | None = None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        message = f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
        line = mark.line + 1 if mark is not None else None
        raise contract_error_at(
            message, loader.where(loader.failed_at), file=file, node=None, line=line
        ) from exc
    except _Refused as exc:
        path = exc.path if exc.node is None or node is None else _path_of(node, exc.node)
        line = exc.node.start_mark.line + 1 if exc.node is not None else _mark_line(loader)
        raise contract_error_at(exc.message, loader.where(path), file=file, node=None, line=line) from exc
    finally:
        loader.dispose()
    return data, node


def _mark_line(loader: _BoundedLoader) -> int | None:
    try:
        event = loader.peek_event()
    except yaml.YAMLError:  # the parser is past its last event: no line to give
        return None
    mark = getattr(event, "start_mark", None)
    return int(mark.line) + 1 if mark is not None else None


def _path_of(root: yaml.Node, target: yaml.Node) -> tuple[Any, ...]:
    """The keys and indexes from ``root`` to ``target`` in a composed YAML tree (first occurrence)."""
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend((value, (*path, key.value)) for key, value in node.value)
            stack.extend((key, path) for key, _ in node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.value))
    return ()
