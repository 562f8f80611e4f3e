"""The one renderer of the ``tallyspan`` command: a command's data as text, or as JSON with ``--json``.

JSON output is ``{"format_version": 1, "command": NAME, "data": ...}`` with the data's dataclasses
turned into objects (``dataclasses.asdict``); tests/cli pin this shape, so scripts can rely on it.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import click

__all__ = ["JSON_FORMAT_VERSION", "emit", "table", "to_json", "to_jsonable"]

JSON_FORMAT_VERSION: Final = 1
"""Bumped whenever a key of the JSON output is renamed or removed (adding keys does not bump it)."""

_T = TypeVar("_T")


def to_jsonable(data: Any) -> Any:
    """Dataclasses (also nested, in lists) to dicts; everything else as is."""
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.asdict(data)
    if isinstance(data, list | tuple):
        return [to_jsonable(item) for item in data]
    return data


def to_json(command: str, data: Any) -> str:
    """The ``--json`` document of ``command``'s result."""
    document = {"format_version": JSON_FORMAT_VERSION, "command": command, "data": to_jsonable(data)}
    return json.dumps(document, ensure_ascii=False, indent=2)


def emit(command: str, data: _T, *, as_json: bool, text: Callable[[_T], str]) -> None:
    """Print ``data``: as the JSON document, or as ``text(data)``."""
    click.echo(to_json(command, data) if as_json else text(data))


def _width(text: str) -> int:
    # Japanese and other wide characters take two terminal columns.
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value) or "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, indent: str = "  ") -> str:
    """Format ``rows`` under ``headers`` in aligned columns; numbers right-aligned, None as "-"."""
    if not rows:
        return f"{indent}(none)"
    cells = [[_cell(value) for value in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(headers))
    ]
    widths = [
        max(_width(text) for text in [header, *(row[i] for row in cells)]) for i, header in enumerate(headers)
    ]

    def line(texts: Sequence[str]) -> str:
        padded = []
        for i, text in enumerate(texts):
            gap = " " * (widths[i] - _width(text))
            padded.append(gap + text if numeric[i] else text + gap)
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])
